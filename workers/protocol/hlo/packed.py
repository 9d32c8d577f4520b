"""Frozen records that keep their fields in one plain tuple.

A module of 10,000 instructions makes tens of thousands of records that live as long as a
diff or a page does. Python's cycle collector walks every object it tracks, field by
field, at each full collection, and a large diff used to set off several of them (the diff
once turned the collector off for the whole server to avoid it). A tuple that holds only
strings, numbers, None and other such tuples the collector stops tracking once it has seen
it. So a record here holds one such tuple, read through typed descriptors (`At`), and at
most a reference or two besides: the collector sees one field where a dataclass would
show it twenty. Every field is set once, when the record is built; setting one later
raises.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Packed:
    """A frozen record whose fields are one tuple (`At` reads each)."""

    __slots__ = ("_fields",)
    _fields: tuple[Any, ...]

    def __init__(self, fields: tuple[Any, ...]) -> None:
        object.__setattr__(self, "_fields", fields)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be deleted")

    def _set_once(self, name: str, value: object) -> None:
        """Set a field kept beside the tuple (a reference to a shared object), when built."""
        object.__setattr__(self, name, value)


class At(Generic[T]):
    """The field at `index` of a Packed record's tuple."""

    __slots__ = ("doc", "index")

    def __init__(self, index: int, doc: str = "") -> None:
        self.index = index
        self.doc = doc

    @overload
    def __get__(self, obj: None, owner: type) -> At[T]: ...

    @overload
    def __get__(self, obj: Packed, owner: type) -> T: ...

    def __get__(self, obj: Packed | None, owner: type) -> At[T] | T:
        if obj is None:
            return self
        value: T = obj._fields[self.index]
        return value
