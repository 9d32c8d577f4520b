"""Bounds-checked reads from a FlatBuffer, the format `jax.export` serializes to.

Every offset is checked against the buffer's length, so a damaged or hostile file raises
`ArtifactError` and nothing is ever read outside its bytes. The buffer is bytes in memory
or a seekable file (a stored upload is never read whole to describe it).
"""

from __future__ import annotations

import struct
from typing import IO


class ArtifactError(ValueError):
    """The bytes are not a usable serialized jax.export.Exported; the message says why."""


class FlatBuffer:
    """Little-endian reads of tables, vectors and strings, each checked against the end."""

    def __init__(self, data: bytes | IO[bytes]) -> None:
        self._bytes = data if isinstance(data, bytes) else None
        self._file = None if isinstance(data, bytes) else data
        self.size = len(data) if isinstance(data, bytes) else data.seek(0, 2)

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

    def i8(self, pos: int) -> int:
        return self._unpack("<b", pos)

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

    def root(self) -> int:
        """The position of the root table."""
        return self.deref(0)

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
