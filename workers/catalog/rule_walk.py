"""Where the rules of a run's fields apply: every leaf field of the result model as a path,
the rule that governs each (the table's longest matching pattern), and each place in a run
where a path has a value.

A path names a field through the models (`measurements[].stats.median`): `[].` steps into
each item of a list, `{}.` into each value of a dict. A leaf is a field whose type holds no
model (a number, a word, a list of numbers, a dict of anything). The rules' mechanisms
(`workers.catalog.rule_kinds`) walk these places; the tests walk the same paths, so a field
added to `RunResult` without a rule fails there first.

Pydantic and the protocol only, no jax.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

from workers.protocol import RunResult

ModelT = TypeVar("ModelT", bound=BaseModel)


def models_in(annotation: object) -> list[type[BaseModel]]:
    """The models a field's type holds (`Stats | None` holds Stats)."""
    found: list[type[BaseModel]] = []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append(annotation)
    for arg in typing.get_args(annotation):
        found += models_in(arg)
    return found


def _container(annotation: object) -> str:
    """How a field's path continues into its model: `[].` for a list, `{}.` for a dict."""
    origins = {typing.get_origin(annotation)}
    origins |= {typing.get_origin(a) for a in typing.get_args(annotation)}
    if list in origins:
        return "[]."
    if dict in origins:
        return "{}."
    return "."


EXTRA_ENTRIES: tuple[str, ...] = (
    "baselines",
    "comparison",
    "compile_only",
    "cuda",
    "kernel",
    "output_sha256",
    "sampled",
    "seed",
    "sizes_distinct",
    "unreported_s",
    "warmed",
)
"""The entries a run's `extra` may carry, each a field of its own with its own rule
(`extra.cuda`); any other entry a worker sends is dropped."""


def field_paths(model: type[BaseModel] = RunResult, prefix: str = "") -> list[str]:
    """Every leaf field of `model`, as a path (`measurements[].stats.median`); a run's
    `extra` entries are fields too (`extra.cuda`)."""
    extra = [f"extra.{e}" for e in EXTRA_ENTRIES] if model is RunResult and not prefix else []
    return [*leaf_types(model, prefix), *extra]


def leaf_types(model: type[BaseModel] = RunResult, prefix: str = "") -> dict[str, object]:
    """Every leaf field of `model` by its path, with its type."""
    found: dict[str, object] = {}
    for name, info in model.model_fields.items():
        inner = models_in(info.annotation)
        if not inner:
            found[prefix + name] = info.annotation
        for m in inner:
            found |= leaf_types(m, prefix + name + _container(info.annotation))
    return found


def covers(pattern: str, path: str) -> bool:
    """Whether a rule's `pattern` matches the field at `path`: the path itself, or any
    field under a pattern that ends in `*`."""
    return path == pattern or (pattern.endswith("*") and path.startswith(pattern[:-1]))


@dataclass(frozen=True)
class Place:
    """One value of a run at a path: `owner[key]` (a model's attribute, a list's item or a
    dict's entry), for reading it and putting a new value there."""

    owner: Any
    key: Any

    def get(self) -> Any:
        if isinstance(self.owner, BaseModel):
            return getattr(self.owner, self.key)
        return self.owner[self.key]

    def put(self, value: Any) -> None:
        if isinstance(self.owner, BaseModel):
            setattr(self.owner, self.key, value)
        elif isinstance(self.owner, dict) and value is None:
            self.owner.pop(self.key, None)  # an `extra` entry withheld is left out
        else:
            self.owner[self.key] = value


@cache
def _steps(path: str) -> tuple[tuple[str, str], ...]:
    """`a[].b{}.c` as (name, how to step on): ("a", "[]"), ("b", "{}"), ("c", "")."""
    steps = []
    for part in path.split("."):
        how = part[-2:] if part.endswith(("[]", "{}")) else ""
        steps.append((part[: len(part) - len(how)], how))
    return tuple(steps)


def split(path: str) -> tuple[str, str]:
    """A field's path as (the path of the models that hold it, its name): `a[].b` as
    ("a[]", "b"); a top-level field's holder is ""."""
    holder, _, name = path.rpartition(".")
    return holder, name


def holders(root: BaseModel, holder: str) -> list[Any]:
    """The models (or an `extra` table) at `holder`, a path as `split` gives it: none where
    one on the way is missing (None), one per item of each list and dict on the way."""
    owners: list[Any] = [root]
    for name, how in _steps(holder) if holder else ():
        found = [f for f in (_child(o, name) for o in owners) if f is not None]
        if how == "[]":
            found = [item for f in found for item in f]
        elif how == "{}":
            found = [item for f in found for item in f.values()]
        owners = found
    return owners


def places(root: BaseModel, path: str) -> Iterator[Place]:
    """Each place in `root` where the field at `path` is (see `holders`)."""
    holder, last = split(path)
    for owner in holders(root, holder):
        if not isinstance(owner, dict) or last in owner:  # an `extra` entry, where sent
            yield Place(owner, last)


def _child(owner: Any, name: str) -> Any:
    return owner.get(name) if isinstance(owner, dict) else getattr(owner, name)


def tree_copy(model: ModelT, shared: frozenset[str] = frozenset()) -> ModelT:
    """A copy of `model` whose every model (in lists and dicts too) is its own, so that a
    field can be given a new value without touching the original; the fields' values
    themselves (numbers, words, lists of them) are shared, as no rule changes one in place,
    and so are the fields named in `shared`, which no rule reaches into."""
    copied = model.model_copy()
    for name, value in model.__dict__.items():
        if name in shared:
            continue
        if isinstance(value, BaseModel):
            setattr(copied, name, tree_copy(value))
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            setattr(copied, name, [tree_copy(v) for v in value])
        elif isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
            setattr(copied, name, {k: tree_copy(v) for k, v in value.items()})
        elif name == "extra" and isinstance(value, dict):
            setattr(copied, name, dict(value))  # its entries are fields of their own
    return copied


def scope_places(root: BaseModel, scope: str) -> Iterator[Place]:
    """Each place of the object (or list) at `scope`, which may end in `[]`: each item."""
    if scope.endswith("[]"):
        for place in places(root, scope[:-2]):
            items = place.get()
            for i in range(len(items) if items is not None else 0):
                yield Place(items, i)
        return
    yield from places(root, scope)
