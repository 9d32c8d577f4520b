"""Content-addressed files in the job store: each distinct byte string is kept once.

A part of `app.store.Store`, on the connection of `app.store.base.StoreBase`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from app.store.base import StoreBase


@dataclass(frozen=True)
class StoredFile:
    """A file's bytes with what is known about them."""

    sha256: str
    data: bytes
    media_type: str
    size: int


class Files(StoreBase):
    """put_file / get_file / attach_file / job_file / job_files on the store."""

    def put_file(self, data: bytes, media_type: str) -> str:
        """Keep `data` (once, whatever the number of callers); return its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        with self._tx() as db:
            at = time.time()
            db.execute(
                "INSERT INTO files (sha256, data, media_type, size, created_at, used_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (sha256) DO UPDATE SET used_at = ?",
                (digest, data, media_type, len(data), at, at, at),
            )
        return digest

    def get_file(self, sha256: str) -> StoredFile | None:
        rows = self._read(
            "SELECT sha256, data, media_type, size FROM files WHERE sha256 = ?", (sha256,)
        )
        if not rows:
            return None
        r = rows[0]
        return StoredFile(r[0], bytes(r[1]), r[2], r[3])

    def attach_file(self, job_id: str, name: str, sha256: str) -> None:
        """Name a stored file on a job (replacing an earlier file of that name)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO job_files (job_id, name, sha256) VALUES (?, ?, ?)",
                (job_id, name, sha256),
            )

    def job_file(self, job_id: str, name: str) -> StoredFile | None:
        rows = self._read(
            "SELECT f.sha256, f.data, f.media_type, f.size FROM job_files j "
            "JOIN files f ON f.sha256 = j.sha256 WHERE j.job_id = ? AND j.name = ?",
            (job_id, name),
        )
        if not rows:
            return None
        r = rows[0]
        return StoredFile(r[0], bytes(r[1]), r[2], r[3])

    def job_files(self, job_id: str) -> Iterator[tuple[str, str, int]]:
        """(name, sha256, size) of every file attached to a job."""
        rows = self._read(
            "SELECT j.name, j.sha256, f.size FROM job_files j JOIN files f "
            "ON f.sha256 = j.sha256 WHERE j.job_id = ? ORDER BY j.name",
            (job_id,),
        )
        return iter([(r[0], r[1], r[2]) for r in rows])
