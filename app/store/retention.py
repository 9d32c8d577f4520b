"""Retention: what the store forgets, so that a long-running server stays within bounds.

A part of `app.store.Store`. `prune` removes, in one transaction each:

- finished jobs (done, failed, expired, cancelled) beyond the newest `keep_jobs`, or
  finished before `finished_before`, with everything they own: their events, runs,
  artifacts and attached files (a profile trace goes with its job); a matrix cell whose
  job went says so, and a matrix whose every job went goes too;
- stored files no job uses any more: a trace whose job went, and an upload no job has
  named since `unused_before`;
- then, while the files still pass `files_max_bytes`, the least recently used file that
  no queued or running job needs.

Freed pages are reused by SQLite; a database created by this version also gives them
back to the file system (auto_vacuum=INCREMENTAL).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass

from app.store.base import StoreBase
from workers.protocol import FINAL_STATUSES, JobStatus

BATCH = 500
STALE_BLOB_S = 3600.0
"""A blob no file names after this long was left by a writer that died mid-file."""
_SHA = re.compile(r"^[0-9a-f]{64}$")
_ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)


@dataclass(frozen=True)
class Pruned:
    """What one `prune` removed."""

    jobs: int = 0
    files: int = 0
    file_bytes: int = 0


def _marks(n: int) -> str:
    return ",".join("?" for _ in range(n))


def _active_files(db: sqlite3.Connection) -> set[str]:
    """The SHA-256 of every file a queued or running job names in its parameters."""
    rows = db.execute(
        f"SELECT spec FROM jobs WHERE status IN ({_marks(len(_ACTIVE))})", _ACTIVE
    ).fetchall()
    needed: set[str] = set()
    for (spec,) in rows:
        params = json.loads(spec).get("params") or {}
        needed.update(v for v in params.values() if isinstance(v, str) and _SHA.match(v))
    return needed


def needed_bytes(db: sqlite3.Connection) -> int:
    """Bytes of the stored files that queued and running jobs need (never removed)."""
    needed = sorted(_active_files(db))
    total = 0
    for start in range(0, len(needed), BATCH):
        chunk = needed[start : start + BATCH]
        row = db.execute(
            f"SELECT coalesce(sum(size), 0) FROM files WHERE sha256 IN ({_marks(len(chunk))})",
            chunk,
        ).fetchone()
        total += int(row[0])
    return total


def _delete_files(db: sqlite3.Connection, shas: list[str]) -> None:
    """Remove files (their rows, their job attachments and their chunks)."""
    for start in range(0, len(shas), BATCH):
        chunk = shas[start : start + BATCH]
        marks = _marks(len(chunk))
        blobs = [
            r[0] for r in db.execute(f"SELECT blob FROM files WHERE sha256 IN ({marks})", chunk)
        ]
        db.execute(f"DELETE FROM job_files WHERE sha256 IN ({marks})", chunk)
        db.execute(f"DELETE FROM files WHERE sha256 IN ({marks})", chunk)
        db.execute(f"DELETE FROM file_blobs WHERE id IN ({_marks(len(blobs))})", blobs)


class Retention(StoreBase):
    """prune() and touch_files() on the store."""

    def touch_files(self, shas: list[str], at: float) -> None:
        """Mark files as used now (a job named them), for least-recently-used eviction."""
        if shas:
            with self._tx() as db:
                db.execute(
                    f"UPDATE files SET used_at = ? WHERE sha256 IN ({_marks(len(shas))})",
                    (at, *shas),
                )

    def files_bytes(self) -> int:
        return int(self._read("SELECT coalesce(sum(size), 0) FROM files")[0][0])

    def prune(
        self,
        *,
        keep_jobs: int,
        finished_before: float,
        unused_before: float,
        files_max_bytes: int,
        attached_media: str,
    ) -> Pruned:
        """Forget what the bounds no longer allow (see the module's docstring).

        `attached_media` is the media type of files that exist only as a job's attachment
        (profile traces): those go as soon as no job holds them.
        """
        jobs = self._prune_jobs(keep_jobs, finished_before)
        files, freed = self._prune_files(unused_before, files_max_bytes, attached_media)
        if jobs or files:
            with self._tx() as db:
                db.execute("PRAGMA incremental_vacuum").fetchall()
        return Pruned(jobs, files, freed)

    def _prune_jobs(self, keep_jobs: int, finished_before: float) -> int:
        final = tuple(s.value for s in FINAL_STATUSES)
        removed = 0
        while True:
            with self._tx() as db:
                ids = [
                    r[0]
                    for r in db.execute(
                        f"SELECT id FROM jobs WHERE status IN ({_marks(len(final))}) AND "
                        f"(updated_at < ? OR id IN (SELECT id FROM jobs WHERE status IN "
                        f"({_marks(len(final))}) ORDER BY updated_at DESC LIMIT -1 OFFSET ?)) "
                        "LIMIT ?",
                        (*final, finished_before, *final, keep_jobs, BATCH),
                    ).fetchall()
                ]
                if not ids:
                    return removed
                marks = _marks(len(ids))
                db.execute(
                    "UPDATE matrix_cells SET job_id = NULL, reason = 'its job was pruned "
                    f"(retention)' WHERE job_id IN ({marks})",
                    ids,
                )
                db.execute(f"DELETE FROM jobs WHERE id IN ({marks})", ids)  # cascades
                db.execute(
                    "DELETE FROM matrices WHERE id NOT IN "
                    "(SELECT matrix_id FROM matrix_cells WHERE job_id IS NOT NULL)"
                )
                removed += len(ids)

    def _prune_files(
        self, unused_before: float, files_max_bytes: int, attached_media: str
    ) -> tuple[int, int]:
        with self._tx() as db:
            needed = _active_files(db)
            attached = {r[0] for r in db.execute("SELECT DISTINCT sha256 FROM job_files")}
            rows = db.execute(
                "SELECT sha256, size, media_type, coalesce(used_at, created_at) AS used "
                "FROM files ORDER BY used"
            ).fetchall()
            total = sum(int(r[1]) for r in rows)
            doomed: list[str] = []
            freed = 0
            for sha, size, media, used in rows:
                if sha in needed:
                    continue
                orphan = sha not in attached and media == attached_media
                stale = sha not in attached and used < unused_before
                if orphan or stale or total > files_max_bytes:
                    doomed.append(sha)
                    total -= int(size)
                    freed += int(size)
            _delete_files(db, doomed)
            # Blobs no file names whose writer stopped long ago (it died mid-file).
            db.execute(
                "DELETE FROM file_blobs WHERE started_at < ? AND id NOT IN "
                "(SELECT blob FROM files WHERE blob IS NOT NULL)",
                (time.time() - STALE_BLOB_S,),
            )
        return len(doomed), freed
