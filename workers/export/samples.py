"""References as a sample: a few thousand (index, value) pairs per result instead of the
whole output, so a 25 MB output is checked from a few kB.

A reference .npz holds, per result, either the whole array (member `NAME`) or a pair
`NAME.indices` (int64, flat indices into the result in C order) and `NAME.values` (the
result's dtype, one value per index). NAME is `outN` (the result's position among the
flat results) or the result's path (`out1/blocks/0/attn/key/kernel`); where the two
would name different results, the path wins. Results the reference leaves out are
reported as unchecked.

`plan` checks a reference's structure from its arrays' headers alone (names, dtypes,
shapes) and `check_ranges` its indices, so the server refuses a bad reference (422 naming
the result) before a job is queued; the worker runs the same checks on what it loads.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workers.export.rules import Named

MAX_SAMPLE = 1_000_000
"""Indices per result a reference may hold (8 MB of int64)."""

INDICES = "indices"
VALUES = "values"


class ReferenceError(ValueError):
    """A reference that cannot be used; `result` names the result it is about."""

    def __init__(self, result: str, message: str) -> None:
        super().__init__(f"{result}: {message}")
        self.result = result


@dataclass(frozen=True)
class Member:
    """One array of a reference archive, as its header declares it."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Entry:
    """How one result is checked: against a whole array, or a sample of its elements."""

    result: int
    """The result's flat position."""
    member: str
    """The archive member (whole) or the pair's common name (sampled)."""
    sampled: bool


def dtype_name(dtype: object) -> str:
    """A dtype's name as the artifact spells it. NumPy keeps a bfloat16 array in an .npz
    as two raw bytes per element (`|V2`), which can only have been bfloat16 here."""
    text = str(dtype)
    return "bfloat16" if text in ("|V2", "<V2", "void16", "V2") else text


def as_dtype(array: Any, name: str) -> Any:
    """`array` read as `name`: raw two-byte values become bfloat16 again."""
    if name == "bfloat16" and getattr(array.dtype, "kind", "") == "V":
        from workers.export.rules import numpy_dtype

        return array.view(numpy_dtype(name))
    return array


def _index_of(key: str, names: Sequence[str]) -> int | None:
    if key in names:
        return list(names).index(key)
    digits = key[3:]
    if key.startswith("out") and digits.isdigit() and str(int(digits)) == digits:
        index = int(digits)
        return index if index < len(names) else None
    return None


def _text(spec: Named) -> str:
    return f"{spec.dtype}[{','.join(map(str, spec.shape))}]"


def _unknown(key: str, names: Sequence[str]) -> ReferenceError:
    listed = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
    return ReferenceError(key, f"names no result (results: {listed})")


def plan(members: Sequence[Member], specs: Sequence[Named]) -> dict[int, Entry]:
    """Per result position, how the reference checks it; ReferenceError naming the result
    for anything that cannot be compared. Only the members' headers are needed."""
    names = [s.name for s in specs]
    found: dict[int, Entry] = {}
    pairs: dict[str, dict[str, Member]] = {}
    for member in members:
        base, dot, part = member.name.rpartition(".")
        if dot and part in (INDICES, VALUES):
            pairs.setdefault(base, {})[part] = member
            continue
        index = _index_of(member.name, names)
        if index is None:
            raise _unknown(member.name, names)
        spec = specs[index]
        if tuple(member.shape) != tuple(spec.shape):
            raise ReferenceError(
                spec.name, f"the reference is {list(member.shape)}, the result {_text(spec)}"
            )
        if index in found:
            raise ReferenceError(spec.name, "the reference holds this result twice")
        found[index] = Entry(index, member.name, sampled=False)
    for base, pair in pairs.items():
        index = _index_of(base, names)
        if index is None:
            raise _unknown(base, names)
        spec = specs[index]
        if index in found:
            raise ReferenceError(spec.name, "the reference holds this result twice")
        missing = {INDICES, VALUES} - set(pair)
        if missing:
            raise ReferenceError(spec.name, f"{base}.{missing.pop()} is missing")
        indices, values = pair[INDICES], pair[VALUES]
        if len(indices.shape) != 1 or len(values.shape) != 1:
            raise ReferenceError(spec.name, "indices and values must be one-dimensional")
        if dtype_name(indices.dtype) != "int64":
            raise ReferenceError(spec.name, f"indices must be int64, not {indices.dtype}")
        if indices.shape[0] != values.shape[0]:
            raise ReferenceError(
                spec.name,
                f"{indices.shape[0]} indices but {values.shape[0]} values: one value per index",
            )
        if indices.shape[0] > MAX_SAMPLE:
            raise ReferenceError(spec.name, f"{indices.shape[0]:,} indices, over {MAX_SAMPLE:,}")
        if dtype_name(values.dtype) != spec.dtype:
            raise ReferenceError(spec.name, f"values are {values.dtype}, the result {_text(spec)}")
        found[index] = Entry(index, base, sampled=True)
    if not found:
        raise ReferenceError("params.reference", "it names none of the results")
    return found


def check_ranges(entry: Entry, indices: Any, spec: Named) -> None:
    """ReferenceError naming the result when an index falls outside it."""
    import numpy as np

    if not len(indices):
        return
    size = math.prod(spec.shape)
    low, high = int(np.min(indices)), int(np.max(indices))
    if low < 0 or high >= size:
        bad = high if high >= size else low
        raise ReferenceError(
            spec.name,
            f"index {bad} is out of range for a result of {size:,} elements ({_text(spec)})",
        )


def write_sample(results: Sequence[Any], k: int, seed: int = 0) -> bytes:
    """An .npz with K seeded indices per result (every element of a result with K or
    fewer), named by flat position `outN`: what `export-fn --save-output-sample K` writes."""
    import numpy as np

    if k < 1:
        raise ValueError("--save-output-sample: K must be at least 1")
    rng = np.random.default_rng(seed)
    arrays: dict[str, Any] = {}
    for i, result in enumerate(results):
        flat = np.asarray(result).reshape(-1)
        count = min(k, flat.size)
        indices = np.sort(rng.choice(flat.size, size=count, replace=False)).astype(np.int64)
        arrays[f"out{i}.{INDICES}"] = indices
        arrays[f"out{i}.{VALUES}"] = flat[indices]
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def expected(
    arrays: Mapping[str, Any], specs: Sequence[Named]
) -> dict[int, tuple[Any | None, Any]]:
    """Per result position: (flat indices or None for a whole array, expected values),
    from a loaded reference archive, checked as the server checks it."""
    members = [Member(n, str(a.dtype), tuple(a.shape)) for n, a in arrays.items()]
    out: dict[int, tuple[Any | None, Any]] = {}
    for index, entry in plan(members, specs).items():
        if entry.sampled:
            indices = arrays[f"{entry.member}.{INDICES}"]
            check_ranges(entry, indices, specs[index])
            values = arrays[f"{entry.member}.{VALUES}"]
            out[index] = (indices, as_dtype(values, specs[index].dtype))
        else:
            out[index] = (None, as_dtype(arrays[entry.member], specs[index].dtype))
    return out
