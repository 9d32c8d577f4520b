"""Reading the header of a serialized `jax.export.Exported`, in pure Python (no jax).

`Exported.serialize()` writes a FlatBuffer (schema: jax/_src/export/serialization.fbs).
The server must say what an uploaded artifact holds — the platforms it was exported for,
its argument and result shapes — and refuse a damaged one, without importing jax. This
module walks just enough of the FlatBuffer to do that, checking every offset against the
buffer's bounds, so a corrupted or hostile file raises `ArtifactError` and never reads
outside its bytes. The worker deserializes with jax itself; this is the server's view.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import IO

__all__ = [
    "DTYPES",
    "ITEMSIZE",
    "MLIR_BYTECODE_MAGIC",
    "ArtifactError",
    "Aval",
    "ExportHeader",
    "read_header",
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

MAX_AVALS = 4096
MAX_RANK = 64
MAX_PLATFORMS = 16
_DIM = re.compile(r"^\d{1,12}$")


class ArtifactError(ValueError):
    """The bytes are not a usable serialized jax.export.Exported; the message says why."""


@dataclass(frozen=True)
class Aval:
    """An argument's or result's abstract value: its shape (dims as written) and dtype."""

    shape: tuple[str, ...]
    dtype: str

    @property
    def concrete(self) -> bool:
        """True when every dimension is a number (no symbolic dimension)."""
        return all(_DIM.match(d) for d in self.shape)

    def dims(self) -> list[int]:
        """The shape as integers; ArtifactError for a symbolic dimension."""
        if not self.concrete:
            raise ArtifactError(f"symbolic shape {self.text()} has no concrete size")
        return [int(d) for d in self.shape]

    def nbytes(self) -> int:
        """Bytes of an array of this shape and dtype; ArtifactError if either is unusable."""
        if self.dtype not in ITEMSIZE:
            raise ArtifactError(f"dtype {self.dtype} cannot be generated or checked")
        count = 1
        for d in self.dims():
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

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: the API returns this with an uploaded artifact."""
        return {
            "function_name": self.function_name,
            "platforms": list(self.platforms),
            "in_avals": [a.text() for a in self.in_avals],
            "out_avals": [a.text() for a in self.out_avals],
            "nr_devices": self.nr_devices,
            "calling_convention_version": self.calling_convention_version,
            "module_bytes": self.module_bytes,
        }


class _Buffer:
    """Bounds-checked little-endian reads from a FlatBuffer, held in memory or read from a
    seekable file (a stored upload is never read whole to describe it)."""

    def __init__(self, data: bytes | IO[bytes]) -> None:
        self._bytes = data if isinstance(data, bytes) else None
        self._file = None if isinstance(data, bytes) else data
        if self._file is not None:
            self.size = self._file.seek(0, 2)
        else:
            self.size = len(data)  # type: ignore[arg-type]

    def read(self, pos: int, count: int) -> bytes:
        """`count` bytes at `pos`; ArtifactError if they run past the end of the file."""
        if pos < 0 or count < 0 or pos + count > self.size:
            raise ArtifactError(f"corrupted: an offset points outside the file (at byte {pos})")
        if self._bytes is not None:
            return self._bytes[pos : pos + count]
        assert self._file is not None
        self._file.seek(pos)
        return self._file.read(count)

    def _unpack(self, fmt: str, pos: int) -> int:
        value: int = struct.unpack(fmt, self.read(pos, struct.calcsize(fmt)))[0]
        return value

    def u8(self, pos: int) -> int:
        return self._unpack("<B", pos)

    def u16(self, pos: int) -> int:
        return self._unpack("<H", pos)

    def i16(self, pos: int) -> int:
        return self._unpack("<h", pos)

    def u32(self, pos: int) -> int:
        return self._unpack("<I", pos)

    def i32(self, pos: int) -> int:
        return self._unpack("<i", pos)

    def deref(self, pos: int) -> int:
        """The position a uoffset stored at `pos` points to."""
        return pos + self.u32(pos)

    def field(self, table: int, slot: int) -> int | None:
        """The absolute position of a table's field, or None when it is absent."""
        vtable = table - self.i32(table)
        size = self.u16(vtable)
        if size < 4 or size % 2:
            raise ArtifactError("corrupted: a table's layout record is malformed")
        if slot >= size:
            return None
        offset = self.u16(vtable + slot)
        return table + offset if offset else None

    def vector(self, pos: int, limit: int) -> tuple[int, int]:
        """(first element position, length) of the vector a field at `pos` refers to."""
        start = self.deref(pos)
        length = self.u32(start)
        if length > limit:
            raise ArtifactError(f"corrupted: a list claims {length:,} entries")
        return start + 4, length

    def span(self, pos: int) -> tuple[int, int]:
        """(start, length) of the string or byte vector a field at `pos` refers to."""
        start = self.deref(pos)
        length = self.u32(start)
        if start + 4 + length > self.size:
            raise ArtifactError("corrupted: a string or byte block runs past the end of the file")
        return start + 4, length

    def blob(self, pos: int) -> bytes:
        """The bytes of a string or byte vector a field at `pos` refers to."""
        return self.read(*self.span(pos))

    def text(self, pos: int) -> str:
        try:
            return self.blob(pos).decode("utf-8")
        except UnicodeDecodeError:
            raise ArtifactError("corrupted: a name is not UTF-8 text") from None

    def strings(self, pos: int | None, limit: int) -> list[str]:
        if pos is None:
            return []
        first, length = self.vector(pos, limit)
        return [self.text(first + 4 * i) for i in range(length)]

    def tables(self, pos: int | None, limit: int) -> list[int]:
        if pos is None:
            return []
        first, length = self.vector(pos, limit)
        return [self.deref(first + 4 * i) for i in range(length)]

    def u32s(self, pos: int | None, limit: int) -> list[int]:
        if pos is None:
            return []
        first, length = self.vector(pos, limit)
        return [self.u32(first + 4 * i) for i in range(length)]


def _aval(buf: _Buffer, table: int) -> Aval:
    kind_at = buf.field(table, _AVAL_KIND)
    if kind_at is not None and buf.u8(kind_at) != 0:
        raise ArtifactError("the function takes or returns a token, which cannot be run here")
    shape = tuple(buf.strings(buf.field(table, _AVAL_SHAPE), MAX_RANK))
    dtype_at = buf.field(table, _AVAL_DTYPE)
    code = buf.u8(dtype_at) if dtype_at is not None else 0
    if code >= len(DTYPES):
        raise ArtifactError(f"corrupted: unknown dtype code {code}")
    return Aval(shape, DTYPES[code])


def _avals(buf: _Buffer, root: int, direct: int, indexed: int, unique: list[Aval]) -> list[Aval]:
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
    buf = _Buffer(data)
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
    return ExportHeader(
        function_name=buf.text(name_at),
        platforms=tuple(p.lower() for p in platforms),
        in_avals=tuple(in_avals),
        out_avals=tuple(out_avals),
        nr_devices=devices,
        calling_convention_version=buf.u16(convention_at) if convention_at is not None else 0,
        module_bytes=module_bytes,
    )
