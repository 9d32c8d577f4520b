"""Content-addressed files in the job store, kept in chunks on both backends: each
distinct byte string is kept once, and no file is ever held whole in memory to store or
to read it.

A part of `app.store.Store`, on the backend of `app.store.base.StoreBase`.

Why chunks: a file stored as one value costs about four times its size in the replica
and in the database server while it is written or read (measured for PostgreSQL's bytea:
256 MiB for a 64 MiB file); as 1 MiB chunks, one chunk each way. Being in the database,
a file uploaded through one replica is served by any other.

The file API, the same whatever database holds the chunks:

- `put_file(chunks, media_type)`: store a file from an iterable of byte strings (any
  sizes); its SHA-256 is computed on the way and returned. The chunks are written in
  short statements of their own (other requests go on meanwhile) under a blob id, and
  the file appears under its SHA-256 only in the last transaction, so no reader sees
  half a file. Storing the same bytes again (even through two replicas at once) keeps
  one copy and drops the other's chunks.
- `file_info(sha)`: its media type and size, or None; `newest_file(media_type)`, the
  most recently used file of a media type (the Python lines sent with a function).
- `file_chunks(sha)`: its bytes as an iterator of chunks of CHUNK_BYTES (the last one
  shorter), or None; each chunk is one short read, no transaction stays open.
- `open_file(sha)`: a seekable binary reader over the chunks (for zipfile, tarfile and
  header readers), or None.

Tables (migration 5): `file_blobs` (one row per stored or half-written file: when its
writing started), `file_chunks` (blob, seq, data) and `files.blob`, the blob a file's
bytes are in. A blob no file names, older than STALE_BLOB_S (its writer died), is
removed by retention.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from app.store.base import StoreBase
from app.store.retention import STALE_BLOB_S, needed_bytes

__all__ = ["CHUNK_BYTES", "STALE_BLOB_S", "ChunkReader", "FileWouldGo", "Files", "StoredFile"]

CHUNK_BYTES = 1024 * 1024
"""The size of every stored chunk but a file's last (migration 5 cuts old files so)."""


@dataclass(frozen=True)
class StoredFile:
    """What is known about a stored file (its bytes: `file_chunks`, `open_file`)."""

    sha256: str
    media_type: str
    size: int


class FileWouldGo(Exception):
    """Storing this file would be pointless: retention would remove it at once, because
    files that queued and running jobs need fill the files' cap. The message says so."""


class Files(StoreBase):
    """put_file / file_info / file_chunks / open_file, and files attached to jobs."""

    def put_file(
        self,
        chunks: bytes | Iterable[bytes],
        media_type: str,
        *,
        files_max_bytes: int | None = None,
        together: int = 0,
    ) -> str:
        """Keep the bytes `chunks` yields (once, whatever the number of callers); their
        SHA-256. With `files_max_bytes`, FileWouldGo (nothing kept) when the files that
        queued and running jobs need leave no room for this one under that cap, and for
        `together` bytes of files stored with it (an upload form's others): least
        recently used files make room for the newest, so files that fit together stay."""
        pieces: Iterable[bytes] = [chunks] if isinstance(chunks, bytes) else chunks
        blob = int(
            self._read("INSERT INTO file_blobs (started_at) VALUES ({NOW}) RETURNING id")[0][0]
        )
        try:
            digest, size = self._write_chunks(blob, pieces)
            with self._tx() as tx:
                touched = tx.execute(
                    self._sql("UPDATE files SET used_at = {NOW} WHERE sha256 = ? RETURNING blob"),
                    (digest,),
                )
                if not touched and files_max_bytes is not None:
                    needed = needed_bytes(tx)
                    if together and needed + size + together > files_max_bytes:
                        raise FileWouldGo(
                            f"the form's files come to {size + together:,} bytes together, "
                            f"and the server's limit for files is {files_max_bytes:,} bytes "
                            f"({needed:,} of them held by files that queued and running jobs "
                            "need): storing the last would remove the first. Send smaller "
                            "files, or ask the operator to raise BOUNDARY_FILES_MAX_BYTES"
                        )
                    if needed + size > files_max_bytes:
                        raise FileWouldGo(
                            f"the server keeps {needed:,} bytes of files that queued and "
                            f"running jobs need (its limit for files is {files_max_bytes:,}); "
                            f"this file of {size:,} bytes would be removed at once: try "
                            "again when they have run"
                        )
                # Another replica may name the same bytes between the UPDATE and here:
                # the first name stays, and this upload's blob goes.
                kept = touched or tx.execute(
                    self._sql(
                        "INSERT INTO files (sha256, blob, media_type, size, created_at, used_at) "
                        "VALUES (?, ?, ?, ?, {NOW}, {NOW}) ON CONFLICT (sha256) "
                        "DO UPDATE SET used_at = excluded.used_at RETURNING blob"
                    ),
                    (digest, blob, media_type, size),
                )
                if int(kept[0][0]) != blob:
                    tx.execute("DELETE FROM file_blobs WHERE id = ?", (blob,))  # and its chunks
        except BaseException:
            self._read("DELETE FROM file_blobs WHERE id = ?", (blob,))
            raise
        return digest

    def _write_chunks(self, blob: int, pieces: Iterable[bytes]) -> tuple[str, int]:
        """Write `pieces` as chunks of CHUNK_BYTES under `blob`; (sha256, size)."""
        insert = self._sql("INSERT INTO file_chunks (blob, seq, data) VALUES (?, ?, ?)")
        digest = hashlib.sha256()
        size = seq = 0
        pending = bytearray()
        for piece in pieces:
            digest.update(piece)
            size += len(piece)
            pending += piece
            while len(pending) >= CHUNK_BYTES:
                self.backend.execute(insert, (blob, seq, bytes(pending[:CHUNK_BYTES])))
                del pending[:CHUNK_BYTES]
                seq += 1
        if pending or seq == 0:
            self.backend.execute(insert, (blob, seq, bytes(pending)))
        return digest.hexdigest(), size

    def file_info(self, sha256: str) -> StoredFile | None:
        rows = self._read("SELECT sha256, media_type, size FROM files WHERE sha256 = ?", (sha256,))
        return StoredFile(rows[0][0], rows[0][1], int(rows[0][2])) if rows else None

    def newest_file(self, media_type: str) -> StoredFile | None:
        """The most recently used (or stored) file of exactly this media type, or None."""
        rows = self._read(
            "SELECT sha256, media_type, size FROM files WHERE media_type = ? "
            "ORDER BY coalesce(used_at, created_at) DESC, sha256 LIMIT 1",
            (media_type,),
        )
        return StoredFile(rows[0][0], rows[0][1], int(rows[0][2])) if rows else None

    def _blob_of(self, sha256: str) -> tuple[int, int] | None:
        rows = self._read("SELECT blob, size FROM files WHERE sha256 = ?", (sha256,))
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def _chunk(self, blob: int, seq: int) -> bytes:
        data = self.backend.read_bytes(
            self._sql("SELECT data FROM file_chunks WHERE blob = ? AND seq = ?"), (blob, seq)
        )
        if data is None:
            raise FileNotFoundError(f"stored file chunk {seq} is gone (the file was removed)")
        return data

    def file_chunks(self, sha256: str) -> Iterator[bytes] | None:
        """The file's bytes, chunk by chunk; None when there is no such file. A file
        removed while it is read ends the iteration with FileNotFoundError."""
        found = self._blob_of(sha256)
        if found is None:
            return None
        blob, size = found

        def chunks() -> Iterator[bytes]:
            for seq in range(max(1, -(-size // CHUNK_BYTES))):
                yield self._chunk(blob, seq)

        return chunks()

    def open_file(self, sha256: str) -> BinaryIO | None:
        """A seekable reader of the file's bytes (one chunk in memory at a time)."""
        found = self._blob_of(sha256)
        if found is None:
            return None
        blob, size = found
        raw = ChunkReader(size, lambda seq: self._chunk(blob, seq))
        return io.BufferedReader(raw, buffer_size=64 * 1024)

    # --- files attached to jobs ----------------------------------------------------------

    def attach_file(self, job_id: str, name: str, sha256: str) -> None:
        """Name a stored file on a job (replacing an earlier file of that name)."""
        self._read(
            "INSERT INTO job_files (job_id, name, sha256) VALUES (?, ?, ?) "
            "ON CONFLICT (job_id, name) DO UPDATE SET sha256 = excluded.sha256",
            (job_id, name, sha256),
        )

    def job_file(self, job_id: str, name: str) -> StoredFile | None:
        rows = self._read(
            "SELECT f.sha256, f.media_type, f.size FROM job_files j "
            "JOIN files f ON f.sha256 = j.sha256 WHERE j.job_id = ? AND j.name = ?",
            (job_id, name),
        )
        return StoredFile(rows[0][0], rows[0][1], int(rows[0][2])) if rows else None

    def job_files(self, job_id: str) -> Iterator[tuple[str, str, int]]:
        """(name, sha256, size) of every file attached to a job."""
        rows = self._read(
            "SELECT j.name, j.sha256, f.size FROM job_files j JOIN files f "
            "ON f.sha256 = j.sha256 WHERE j.job_id = ? ORDER BY j.name",
            (job_id,),
        )
        return iter([(r[0], r[1], int(r[2])) for r in rows])


class ChunkReader(io.RawIOBase):
    """A seekable, read-only raw stream over a file kept in chunks of CHUNK_BYTES:
    `fetch(seq)` gives chunk `seq`; the last one fetched is kept for the next read."""

    def __init__(self, size: int, fetch: Callable[[int], bytes]) -> None:
        self._size = size
        self._fetch = fetch
        self._pos = 0
        self._cached: tuple[int, bytes] | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError("a negative position in a stored file")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._pos >= self._size or not len(view):
            return 0
        seq, start = divmod(self._pos, CHUNK_BYTES)
        if self._cached is None or self._cached[0] != seq:
            self._cached = (seq, self._fetch(seq))
        chunk = self._cached[1]
        count = min(len(view), len(chunk) - start, self._size - self._pos)
        view[:count] = chunk[start : start + count]
        self._pos += count
        return count
