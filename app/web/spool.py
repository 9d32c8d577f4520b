"""Request bodies spooled to disk as they arrive: an upload is never held whole in memory.

A file is written under the spool folder (beside the database, so on the disk that
keeps it) as its bytes stream in, hashed on the way, and capped: past its cap the
writer refuses at once. The caller stores the spooled file (in chunks, from disk) and
deletes it; a spooled file a crash left behind is removed the next time the folder is
opened, once it is an hour old.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = ".upload-"
STALE_S = 3600.0
READ_BYTES = 1024 * 1024


class OverCap(Exception):
    """A spooled file passed its cap; nothing of it is kept."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"over {limit:,} bytes")
        self.limit = limit


@dataclass(frozen=True)
class Spooled:
    """A file on disk: where, how big, its SHA-256 and the name a form gave it."""

    path: Path
    size: int
    sha256: str
    filename: str | None = None

    def chunks(self) -> Iterator[bytes]:
        """Its bytes, a chunk at a time."""
        with open(self.path, "rb") as handle:
            while piece := handle.read(READ_BYTES):
                yield piece

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def spool_folder(data_dir: Path) -> Path:
    """The spool folder under `data_dir`, made if needed, without stale leftovers."""
    folder = data_dir / "spool"
    folder.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - STALE_S
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):
            if entry.name.startswith(PREFIX) and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
    return folder


class SpoolWriter:
    """One file being spooled: `write` pieces, then `close` (a Spooled) or `abandon`."""

    def __init__(self, folder: Path, limit: int, filename: str | None = None) -> None:
        handle, raw = tempfile.mkstemp(prefix=PREFIX, dir=folder)
        self._handle: int | None = handle
        self.path = Path(raw)
        self.limit = limit
        self.filename = filename
        self.size = 0
        self._digest = hashlib.sha256()

    def write(self, piece: bytes) -> None:
        """Append `piece`; OverCap (the file removed) once the file passes its limit."""
        assert self._handle is not None
        self.size += len(piece)
        if self.size > self.limit:
            self.abandon()
            raise OverCap(self.limit)
        self._digest.update(piece)
        view = memoryview(piece)
        try:
            while view:
                view = view[os.write(self._handle, view) :]
        except BaseException:
            self.abandon()
            raise

    def close(self) -> Spooled:
        assert self._handle is not None
        os.close(self._handle)
        self._handle = None
        return Spooled(self.path, self.size, self._digest.hexdigest(), self.filename)

    def abandon(self) -> None:
        """Remove what was written (idempotent)."""
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None
        self.path.unlink(missing_ok=True)


async def spool_body(chunks: AsyncIterator[bytes], folder: Path, limit: int) -> Spooled:
    """A request body, to a file in `folder`; OverCap as soon as it passes `limit`."""
    writer = SpoolWriter(folder, limit)
    try:
        async for chunk in chunks:
            writer.write(chunk)
    except BaseException:
        writer.abandon()
        raise
    return writer.close()
