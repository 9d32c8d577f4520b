"""Content-addressed files in the job store: each distinct byte string is kept once, in
chunks of CHUNK_BYTES, on both backends.

Why chunks: a file stored as one value costs about four times its size in the replica
and in the database server while it is written or read (measured for PostgreSQL's bytea:
256 MiB for a 64 MiB file); as 1 MiB chunks, one chunk each way. An upload arrives as
any iterable of byte strings: each full chunk is stored under a random key as it comes
(short statements, no transaction held open), while its SHA-256 is computed; then one
transaction names the file by its hash, or, when those bytes are already stored, marks
the existing file used and drops this upload's chunks. A read takes one chunk per query,
so no transaction stays open while a worker downloads. An upload that dies half-way
leaves chunks no file names; retention removes them after an hour.

A part of `app.store.Store`, on the backend of `app.store.base.StoreBase`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from app.store.base import StoreBase

CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FileInfo:
    """What is known about a stored file besides its bytes."""

    sha256: str
    media_type: str
    size: int
    chunks_key: str


@dataclass(frozen=True)
class StoredFile:
    """A file's bytes with what is known about them."""

    sha256: str
    data: bytes
    media_type: str
    size: int


class Files(StoreBase):
    """put_file / get_file / file_chunks / attach_file / job_file / job_files on the store."""

    def put_file(self, data: bytes, media_type: str) -> str:
        """Keep `data` (once, whatever the number of callers); return its sha256."""
        return self.put_file_stream([data], media_type)

    def put_file_stream(self, parts: Iterable[bytes], media_type: str) -> str:
        """Keep the bytes `parts` yields (pieces of any size), never holding more than a
        chunk of them; return their sha256."""
        key = secrets.token_hex(12)
        digest = hashlib.sha256()
        size = seq = 0
        pending = bytearray()
        insert = self._sql(
            "INSERT INTO file_chunks (key, seq, data, created_at) VALUES (?, ?, ?, {NOW})"
        )
        for part in parts:
            digest.update(part)
            size += len(part)
            pending += part
            while len(pending) >= CHUNK_BYTES:
                self.backend.execute(insert, (key, seq, bytes(pending[:CHUNK_BYTES])))
                del pending[:CHUNK_BYTES]
                seq += 1
        if pending or seq == 0:
            self.backend.execute(insert, (key, seq, bytes(pending)))
        sha = digest.hexdigest()
        with self._tx() as tx:
            rows = tx.execute(
                self._sql(
                    "INSERT INTO files (sha256, media_type, size, created_at, used_at, chunks_key) "
                    "VALUES (?, ?, ?, {NOW}, {NOW}, ?) ON CONFLICT (sha256) "
                    "DO UPDATE SET used_at = excluded.used_at RETURNING chunks_key"
                ),
                (sha, media_type, size, key),
            )
            if rows[0][0] != key:  # already stored: this upload's chunks are not needed
                tx.execute("DELETE FROM file_chunks WHERE key = ?", (key,))
        return sha

    def file_info(self, sha256: str) -> FileInfo | None:
        rows = self._read(
            "SELECT sha256, media_type, size, chunks_key FROM files WHERE sha256 = ?", (sha256,)
        )
        return FileInfo(rows[0][0], rows[0][1], int(rows[0][2]), rows[0][3]) if rows else None

    def file_chunks(self, info: FileInfo) -> Iterator[bytes]:
        """The file's bytes, a chunk at a time. LookupError when a chunk has gone (the
        file was evicted while it was read)."""
        select = "SELECT data FROM file_chunks WHERE key = ? AND seq = ?"
        for seq in range(max(1, -(-info.size // CHUNK_BYTES))):
            data = self.backend.read_bytes(select, (info.chunks_key, seq))
            if data is None:
                raise LookupError(f"file {info.sha256} lost its chunk {seq}")
            yield data

    def get_file(self, sha256: str) -> StoredFile | None:
        """A stored file whole (uploads are at most tens of MiB; workers get them by
        `file_chunks`)."""
        info = self.file_info(sha256)
        if info is None:
            return None
        try:
            data = b"".join(self.file_chunks(info))
        except LookupError:
            return None
        return StoredFile(info.sha256, data, info.media_type, info.size)

    def attach_file(self, job_id: str, name: str, sha256: str) -> None:
        """Name a stored file on a job (replacing an earlier file of that name)."""
        self._read(
            "INSERT INTO job_files (job_id, name, sha256) VALUES (?, ?, ?) "
            "ON CONFLICT (job_id, name) DO UPDATE SET sha256 = excluded.sha256",
            (job_id, name, sha256),
        )

    def job_file(self, job_id: str, name: str) -> StoredFile | None:
        rows = self._read(
            "SELECT sha256 FROM job_files WHERE job_id = ? AND name = ?", (job_id, name)
        )
        return self.get_file(rows[0][0]) if rows else None

    def job_files(self, job_id: str) -> Iterator[tuple[str, str, int]]:
        """(name, sha256, size) of every file attached to a job."""
        rows = self._read(
            "SELECT j.name, j.sha256, f.size FROM job_files j JOIN files f "
            "ON f.sha256 = j.sha256 WHERE j.job_id = ? ORDER BY j.name",
            (job_id,),
        )
        return iter([(r[0], r[1], int(r[2])) for r in rows])
