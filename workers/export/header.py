"""Reading the header of a serialized `jax.export.Exported`, in pure Python (no jax).

`Exported.serialize()` writes a FlatBuffer (schema: jax/_src/export/serialization.fbs).
The server must say what an uploaded artifact holds (the platforms it was exported for,
its device count, its arguments and results with their shapes, names and shardings) and
refuse a damaged one, without importing jax. This module walks just enough of the
FlatBuffer to do that, through `workers.export.flatbuffer`'s bounds-checked reads (the
shardings: `workers.export.shardings`).

Names come from the artifact's own trees (`in_tree`, `out_tree`), so the server, the
worker and `boundary export-fn` name every argument and result alike:

- arguments: a keyword argument by its path (`params/blocks/0/attn/key/kernel`,
  `tokens`), a positional one as `argN` then its path (`arg0/w`);
- results: one bare result is `out0`; the elements of a returned tuple or list are
  `outN` then their path (`out1/blocks/0/attn/key/kernel`); a returned dict's by path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO

from workers.export.dims import DimError
from workers.export.dims import names as dim_names
from workers.export.dims import value as dim_value
from workers.export.flatbuffer import ArtifactError, FlatBuffer
from workers.export.shardings import ArraySharding, MeshShape, read_shardings

__all__ = [
    "DTYPES",
    "ITEMSIZE",
    "MLIR_BYTECODE_MAGIC",
    "ArraySharding",
    "ArtifactError",
    "Aval",
    "ExportHeader",
    "argument_names",
    "path_name",
    "read_header",
    "result_names",
]

MLIR_BYTECODE_MAGIC = b"ML\xefR"
"""Every MLIR bytecode file starts with these four bytes."""

DTYPES: tuple[str, ...] = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bfloat16",
    "int4",
    "uint4",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float0",
    "float8_e4m3",
    "float8_e3m4",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "key<fry>",
    "key<rbg>",
    "key<unsafe_rbg>",
)
"""NumPy names of the schema's DType enum, by value."""

ITEMSIZE: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
    "bfloat16": 2,
}
"""Bytes per element of the dtypes a worker can generate and check (the first 15)."""

# vtable offsets of the fields read (4 + 2 × field index in the schema).
_FUNCTION_NAME = 6
_IN_AVALS = 10
_OUT_AVALS = 14
_NR_DEVICES_SHORT = 16
_PLATFORMS = 22
_MLIR_MODULE = 30
_CALLING_CONVENTION = 32
_NR_DEVICES = 40
_UNIQUE_AVALS = 42
_IN_AVALS_IDXS = 48
_OUT_AVALS_IDXS = 50
# ... and of an AbstractValue's.
_AVAL_KIND = 4
_AVAL_SHAPE = 6
_AVAL_DTYPE = 8
# ... and of a PyTreeDef's (in_tree is field 2, out_tree field 4).
_IN_TREE = 8
_OUT_TREE = 12
_TREE_KIND = 4
_TREE_CHILDREN = 6
_TREE_KEYS = 8
_LEAF, _NONE, _TUPLE, _LIST, _DICT, _CUSTOM = range(6)

MAX_AVALS = 4096
MAX_TREE_NODES = 100_000
MAX_TREE_DEPTH = 64
MAX_RANK = 64
MAX_PLATFORMS = 16
_DIM = re.compile(r"^\d{1,12}$")


@dataclass(frozen=True)
class Aval:
    """An argument's or result's abstract value: its shape (dims as written) and dtype."""

    shape: tuple[str, ...]
    dtype: str

    @property
    def concrete(self) -> bool:
        """True when every dimension is a number (no symbolic dimension)."""
        return all(_DIM.match(d) for d in self.shape)

    def names(self) -> set[str]:
        """The symbolic dimensions' names its shape uses (`workers.export.dims`)."""
        return {n for d in self.shape if not _DIM.match(d) for n in dim_names(d)}

    def dims(self, values: Mapping[str, int] | None = None) -> list[int]:
        """The shape as integers, each symbolic dimension at `values`; ArtifactError for
        one without a value."""
        if self.concrete:
            return [int(d) for d in self.shape]
        try:
            return [dim_value(d, values or {}) for d in self.shape]
        except DimError as exc:
            raise ArtifactError(f"shape {self.text()}: {exc}") from None

    def nbytes(self, values: Mapping[str, int] | None = None) -> int:
        """Bytes of an array of this shape and dtype (symbolic dimensions at `values`);
        ArtifactError if either is unusable."""
        if self.dtype not in ITEMSIZE:
            raise ArtifactError(f"dtype {self.dtype} cannot be generated or checked")
        count = 1
        for d in self.dims(values):
            count *= d
        return count * ITEMSIZE[self.dtype]

    def text(self) -> str:
        """Written as jax writes it, e.g. float32[1024,1024]."""
        return f"{self.dtype}[{','.join(self.shape)}]"


@dataclass(frozen=True)
class ExportHeader:
    """What a serialized Exported declares about itself."""

    function_name: str
    platforms: tuple[str, ...]
    in_avals: tuple[Aval, ...]
    out_avals: tuple[Aval, ...]
    nr_devices: int
    calling_convention_version: int
    module_bytes: int
    argument_names: tuple[str, ...] = field(default=())
    """One per flat argument, in `in_avals` order (see the module's docstring)."""
    result_names: tuple[str, ...] = field(default=())
    """One per flat result, in `out_avals` order."""
    in_shardings: tuple[ArraySharding, ...] = field(default=())
    """One per flat argument (unspecified ones included); empty when not read."""
    out_shardings: tuple[ArraySharding, ...] = field(default=())

    def dimensions(self) -> list[str]:
        """The names of its symbolic dimensions (`jax.export.symbolic_shape`), sorted: a
        run gives each a value (`params.dims`). Empty for concrete shapes."""
        return sorted({n for a in (*self.in_avals, *self.out_avals) for n in a.names()})

    def meshes(self) -> list[MeshShape]:
        """The meshes its shardings name (usually one), in first-named order."""
        found: list[MeshShape] = []
        for sharding in (*self.in_shardings, *self.out_shardings):
            if sharding.mesh is not None and sharding.mesh not in found:
                found.append(sharding.mesh)
        return found

    def _placements(
        self, avals: tuple[Aval, ...], shardings: tuple[ArraySharding, ...], result: bool
    ) -> list[dict[str, object]]:
        if len(shardings) != len(avals):
            return []
        return [
            s.as_dict(tuple(a.dims()) if a.concrete else None, a.dtype, result)
            for a, s in zip(avals, shardings, strict=True)
        ]

    def arguments(self) -> list[tuple[str, Aval]]:
        """(name, aval) of every flat argument, in call order."""
        return list(zip(self.argument_names, self.in_avals, strict=True))

    def results(self) -> list[tuple[str, Aval]]:
        """(name, aval) of every flat result, in order."""
        return list(zip(self.result_names, self.out_avals, strict=True))

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: the API returns this with an uploaded artifact."""
        return {
            "function_name": self.function_name,
            "platforms": list(self.platforms),
            "in_avals": [a.text() for a in self.in_avals],
            "dimensions": self.dimensions(),
            "out_avals": [a.text() for a in self.out_avals],
            "argument_names": list(self.argument_names),
            "result_names": list(self.result_names),
            "nr_devices": self.nr_devices,
            "meshes": [m.as_dict() for m in self.meshes()],
            "in_shardings": self._placements(self.in_avals, self.in_shardings, False),
            "out_shardings": self._placements(self.out_avals, self.out_shardings, True),
            "calling_convention_version": self.calling_convention_version,
            "module_bytes": self.module_bytes,
        }


def _aval(buf: FlatBuffer, table: int) -> Aval:
    kind_at = buf.field(table, _AVAL_KIND)
    if kind_at is not None and buf.u8(kind_at) != 0:
        raise ArtifactError("the function takes or returns a token, which cannot be run here")
    shape = tuple(buf.strings(buf.field(table, _AVAL_SHAPE), MAX_RANK))
    dtype_at = buf.field(table, _AVAL_DTYPE)
    code = buf.u8(dtype_at) if dtype_at is not None else 0
    if code >= len(DTYPES):
        raise ArtifactError(f"corrupted: unknown dtype code {code}")
    return Aval(shape, DTYPES[code])


def _avals(buf: FlatBuffer, root: int, direct: int, indexed: int, unique: list[Aval]) -> list[Aval]:
    """Arguments or results, read the way jax reads them: by index when indices exist."""
    indices = buf.u32s(buf.field(root, indexed), MAX_AVALS)
    if indices:
        if any(i >= len(unique) for i in indices):
            raise ArtifactError("corrupted: an argument refers to a shape that is not there")
        return [unique[i] for i in indices]
    return [_aval(buf, t) for t in buf.tables(buf.field(root, direct), MAX_AVALS)]


def read_header(data: bytes | IO[bytes]) -> ExportHeader:
    """The header of a serialized Exported, from its bytes or a seekable file of them;
    ArtifactError when it is not one. Only the header is read (not the module)."""
    buf = FlatBuffer(data)
    if buf.size < 16:
        raise ArtifactError("not a jax.export artifact: the file is too short")
    root = buf.u32(0)
    name_at = buf.field(root, _FUNCTION_NAME)
    module_at = buf.field(root, _MLIR_MODULE)
    if name_at is None or module_at is None:
        raise ArtifactError("not a jax.export artifact: no function name or no StableHLO module")
    module_start, module_bytes = buf.span(module_at)
    magic = buf.read(module_start, min(module_bytes, len(MLIR_BYTECODE_MAGIC)))
    if magic != MLIR_BYTECODE_MAGIC:
        raise ArtifactError("not a jax.export artifact: its module is not MLIR bytecode")
    unique = [_aval(buf, t) for t in buf.tables(buf.field(root, _UNIQUE_AVALS), MAX_AVALS)]
    in_avals = _avals(buf, root, _IN_AVALS, _IN_AVALS_IDXS, unique)
    out_avals = _avals(buf, root, _OUT_AVALS, _OUT_AVALS_IDXS, unique)
    platforms = buf.strings(buf.field(root, _PLATFORMS), MAX_PLATFORMS)
    if not platforms:
        raise ArtifactError("not a jax.export artifact: it names no platform")
    devices_at = buf.field(root, _NR_DEVICES)
    devices = buf.u32(devices_at) if devices_at is not None else 0
    if not devices:
        short_at = buf.field(root, _NR_DEVICES_SHORT)
        devices = buf.i16(short_at) if short_at is not None else 1
    convention_at = buf.field(root, _CALLING_CONVENTION)
    arguments = argument_names(_tree_paths(buf, root, _IN_TREE))
    results = result_names(_tree_paths(buf, root, _OUT_TREE))
    if len(arguments) != len(in_avals) or len(results) != len(out_avals):
        raise ArtifactError("corrupted: its argument or result tree does not match its shapes")
    in_shardings, out_shardings = read_shardings(buf, root, len(in_avals), len(out_avals))
    return ExportHeader(
        function_name=buf.text(name_at),
        platforms=tuple(p.lower() for p in platforms),
        in_avals=tuple(in_avals),
        out_avals=tuple(out_avals),
        nr_devices=devices,
        calling_convention_version=buf.u16(convention_at) if convention_at is not None else 0,
        module_bytes=module_bytes,
        argument_names=tuple(arguments),
        result_names=tuple(results),
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )


# --- names from the artifact's trees --------------------------------------------------------

TreePath = tuple[str | int, ...]
"""A leaf's place in a tree: dict keys (str) and tuple or list positions (int)."""


class _TreeWalk:
    """The leaves of a serialized PyTreeDef, bounded in size and depth."""

    def __init__(self, buf: FlatBuffer) -> None:
        self.buf = buf
        self.nodes = 0
        self.found: list[TreePath] = []

    def visit(self, table: int, path: TreePath, depth: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_TREE_NODES or depth > MAX_TREE_DEPTH:
            raise ArtifactError("its argument or result tree is too large or too deep")
        buf = self.buf
        kind_at = buf.field(table, _TREE_KIND)
        kind = buf.i8(kind_at) if kind_at is not None else _LEAF
        if kind == _LEAF:
            self.found.append(path)
            return
        if kind == _NONE:
            return
        if kind not in (_TUPLE, _LIST, _DICT, _CUSTOM):
            raise ArtifactError(f"corrupted: unknown tree node kind {kind}")
        children = buf.tables(buf.field(table, _TREE_CHILDREN), MAX_TREE_NODES)
        if kind == _DICT:
            keys = buf.strings(buf.field(table, _TREE_KEYS), MAX_TREE_NODES)
            if len(keys) != len(children):
                raise ArtifactError("corrupted: a dict has more children than keys, or fewer")
            for key, child in zip(keys, children, strict=True):
                self.visit(child, (*path, key), depth + 1)
            return
        for i, child in enumerate(children):
            self.visit(child, (*path, i), depth + 1)


def _tree_paths(buf: FlatBuffer, root: int, slot: int) -> list[TreePath]:
    at = buf.field(root, slot)
    if at is None:
        raise ArtifactError("not a jax.export artifact: it keeps no argument or result tree")
    walk = _TreeWalk(buf)
    walk.visit(buf.deref(at), (), 0)
    return walk.found


def path_name(path: TreePath) -> str:
    """`("params", "blocks", 0)` as `params/blocks/0`."""
    return "/".join(str(part) for part in path)


def argument_names(paths: list[TreePath]) -> list[str]:
    """Names of flat arguments from their paths in `in_tree`, a pair (args, kwargs)."""
    names: list[str] = []
    for path in paths:
        if len(path) >= 2 and path[0] == 0:  # the positional tuple
            names.append(path_name((f"arg{path[1]}", *path[2:])))
        elif len(path) >= 2 and path[0] == 1:  # the keyword dict
            names.append(path_name(path[1:]))
        else:
            names.append(path_name(path) or "arg0")
    return names


def result_names(paths: list[TreePath]) -> list[str]:
    """Names of flat results from their paths in `out_tree`."""
    names: list[str] = []
    for path in paths:
        if not path:
            names.append("out0")
        elif isinstance(path[0], int):
            names.append(path_name((f"out{path[0]}", *path[1:])))
        else:
            names.append(path_name(path))
    return names
