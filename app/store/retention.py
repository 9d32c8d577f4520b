"""Retention: what the store forgets, so that a long-running server stays within bounds.

A part of `app.store.Store`. `prune` runs on one replica at a time (an advisory lock on
PostgreSQL, which a replica that dies loses with its connection; another replica pruning
at that moment makes this one skip its turn) and removes, in one transaction each:

- finished jobs (done, failed, expired, cancelled) beyond the newest `keep_jobs`, or
  finished before `finished_age_s` ago, with everything they own: their events, runs,
  artifacts and attached files (a profile trace goes with its job); a matrix cell whose
  job went says so, and a matrix whose every job went goes too, as does an ended fit
  search whose every probe's job went (a probe keeps its verdict meanwhile);
- stored files no job uses any more: a trace whose job went, and an upload no job has
  named for `unused_age_s`; the Python lines sent with a function stay while it stays
  (the newest document of them) and go with it;
- then, while the files still pass `files_max_bytes`, the least recently used file that
  no queued or running job needs. Each deletion re-states the `used_at` it was planned
  on, so a file another replica used meanwhile (a new job named it, or it was uploaded
  again) stays;
- blobs of uploads that died half-way (after STALE_BLOB_S), submission counts older
  than the rate window, and workers silent for a day.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from app.store.base import StoreBase, marks
from app.store.dialect import Tx
from workers.catalog.jaxexport import SOURCES_MEDIA_TYPE
from workers.protocol import FINAL_STATUSES, JobStatus

BATCH = 500
RETENTION_LOCK = "boundary:retention"
STALE_BLOB_S = 3600.0
"""A blob no file names after this long was left by a writer that died mid-file."""
RATE_WINDOW_S = 60.0
FORGET_WORKERS_S = 24 * 3600.0
_SHA = re.compile(r"^[0-9a-f]{64}$")
_SOURCES_OF = re.compile(re.escape(SOURCES_MEDIA_TYPE) + r"; artifact=([0-9a-f]{64})$")
"""The media type of the Python lines sent with a function: they stay while it stays."""
_ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)


@dataclass(frozen=True)
class Pruned:
    """What one `prune` removed (None when another replica was pruning)."""

    jobs: int = 0
    files: int = 0
    file_bytes: int = 0


def _active_files(tx: Tx) -> set[str]:
    """The SHA-256 of every file a queued or running job names in its parameters."""
    rows = tx.execute(f"SELECT spec FROM jobs WHERE status IN ({marks(len(_ACTIVE))})", _ACTIVE)
    needed: set[str] = set()
    for (spec,) in rows:
        params = json.loads(spec).get("params") or {}
        needed.update(v for v in params.values() if isinstance(v, str) and _SHA.match(v))
    return needed


def needed_bytes(tx: Tx) -> int:
    """Bytes of the stored files that queued and running jobs need (never removed)."""
    needed = sorted(_active_files(tx))
    total = 0
    for start in range(0, len(needed), BATCH):
        chunk = needed[start : start + BATCH]
        rows = tx.execute(
            f"SELECT coalesce(sum(size), 0) FROM files WHERE sha256 IN ({marks(len(chunk))})",
            chunk,
        )
        total += int(rows[0][0])
    return total


def _sources_doomed(
    follow: list[tuple[str, float, int, str]], kept: set[str]
) -> list[tuple[str, float, int]]:
    """Of the sources documents (sha, used, size, function), those that go: each whose
    function goes or is gone, and all but the newest of one function's."""
    newest: dict[str, tuple[str, float, int]] = {}
    doomed: list[tuple[str, float, int]] = []
    for sha, used, size, owner in sorted(follow, key=lambda f: f[1], reverse=True):
        if owner in kept and owner not in newest:
            newest[owner] = (sha, used, size)
        else:
            doomed.append((sha, used, size))
    return doomed


class Retention(StoreBase):
    """prune(), touch_files() and files_bytes() on the store."""

    def touch_files(self, shas: list[str]) -> None:
        """Mark files as used now (a job named them), for least-recently-used eviction."""
        if shas:
            self._read(
                f"UPDATE files SET used_at = {{NOW}} WHERE sha256 IN ({marks(len(shas))})",
                tuple(shas),
            )

    def files_bytes(self) -> int:
        return int(self._read("SELECT coalesce(sum(size), 0) FROM files")[0][0])

    def prune(
        self,
        *,
        keep_jobs: int,
        finished_age_s: float,
        unused_age_s: float,
        files_max_bytes: int,
        attached_media: str,
    ) -> Pruned | None:
        """Forget what the bounds no longer allow (see the module's docstring); None when
        another replica is pruning now.

        `attached_media` is the media type of files that exist only as a job's attachment
        (profile traces): those go as soon as no job holds them.
        """
        with self.backend.try_exclusive(RETENTION_LOCK) as mine:
            if not mine:
                return None
            jobs = self._prune_jobs(keep_jobs, finished_age_s)
            files, freed = self._prune_files(unused_age_s, files_max_bytes, attached_media)
            # Blobs no file names whose writer stopped long ago (it died mid-file).
            self._read(
                "DELETE FROM file_blobs WHERE started_at < {NOW} - ? AND id NOT IN "
                "(SELECT blob FROM files WHERE blob IS NOT NULL)",
                (STALE_BLOB_S,),
            )
            self._read("DELETE FROM rate_hits WHERE at <= {NOW} - ?", (RATE_WINDOW_S,))
            self._read("DELETE FROM workers WHERE last_heartbeat < {NOW} - ?", (FORGET_WORKERS_S,))
        if jobs or files:
            self.backend.maintain()
        return Pruned(jobs, files, freed)

    def _prune_jobs(self, keep_jobs: int, finished_age_s: float) -> int:
        final = tuple(s.value for s in FINAL_STATUSES)
        removed = 0
        while True:
            with self._tx() as tx:
                ids = [
                    r[0]
                    for r in tx.execute(
                        self._sql(
                            f"SELECT id FROM jobs WHERE status IN ({marks(len(final))}) AND "
                            "(updated_at < {NOW} - ? OR id NOT IN (SELECT id FROM jobs WHERE "
                            f"status IN ({marks(len(final))}) ORDER BY updated_at DESC LIMIT ?)) "
                            "LIMIT ?"
                        ),
                        (*final, finished_age_s, *final, keep_jobs, BATCH),
                    )
                ]
                if not ids:
                    return removed
                in_ids = marks(len(ids))
                tx.execute(
                    "UPDATE matrix_cells SET job_id = NULL, reason = 'its job was pruned "
                    f"(retention)' WHERE job_id IN ({in_ids})",
                    ids,
                )
                tx.execute(f"DELETE FROM jobs WHERE id IN ({in_ids})", ids)  # cascades
                tx.execute(
                    "DELETE FROM matrices WHERE id NOT IN "
                    "(SELECT matrix_id FROM matrix_cells WHERE job_id IS NOT NULL)"
                )
                tx.execute(  # an ended search goes with its last probe's job (cascades)
                    "DELETE FROM fits WHERE status <> 'running' AND NOT EXISTS (SELECT 1 "
                    "FROM fit_probes p JOIN jobs j ON j.id = p.job_id WHERE p.fit_id = fits.id)"
                )
                removed += len(ids)

    def _prune_files(
        self, unused_age_s: float, files_max_bytes: int, attached_media: str
    ) -> tuple[int, int]:
        with self._tx() as tx:
            needed = _active_files(tx)
            attached = {r[0] for r in tx.execute("SELECT DISTINCT sha256 FROM job_files")}
            unused_before = float(tx.execute(self._sql("SELECT {NOW} - ?"), (unused_age_s,))[0][0])
            rows = tx.execute(
                "SELECT sha256, size, media_type, coalesce(used_at, created_at) AS used "
                "FROM files ORDER BY used, sha256"
            )
            total = sum(int(r[1]) for r in rows)
            doomed: list[tuple[str, float, int]] = []
            follow: list[tuple[str, float, int, str]] = []
            for sha, size, media, used in rows:
                owner = _SOURCES_OF.match(media)
                if owner is not None:  # judged with its function, below
                    follow.append((sha, float(used), int(size), owner[1]))
                    continue
                if sha in needed:
                    continue
                orphan = sha not in attached and media == attached_media
                stale = sha not in attached and float(used) < unused_before
                if orphan or stale or total > files_max_bytes:
                    doomed.append((sha, float(used), int(size)))
                    total -= int(size)
            doomed += _sources_doomed(follow, {r[0] for r in rows} - {d[0] for d in doomed})
        removed = freed = 0
        for start in range(0, len(doomed), BATCH):
            with self._tx() as tx:
                for sha, used, size in doomed[start : start + BATCH]:
                    if self._delete_file(tx, sha, used):
                        removed += 1
                        freed += size
        return removed, freed

    def _delete_file(self, tx: Tx, sha: str, used: float) -> bool:
        """Delete a file unless it was used since `used`, or a queued or running job
        names it now; with its chunks and its attachments."""
        found = tx.execute(
            self._sql(
                "SELECT blob FROM files WHERE sha256 = ? "
                "AND coalesce(used_at, created_at) = ? AND NOT EXISTS (SELECT 1 FROM jobs "
                f"WHERE status IN ({marks(len(_ACTIVE))}) AND spec LIKE ?){{FOR_UPDATE}}"
            ),
            (sha, used, *_ACTIVE, f"%{sha}%"),
        )
        if not found:
            return False
        tx.execute("DELETE FROM job_files WHERE sha256 = ?", (sha,))
        tx.execute("DELETE FROM files WHERE sha256 = ?", (sha,))
        tx.execute("DELETE FROM file_blobs WHERE id = ?", (found[0][0],))  # and its chunks
        return True
