"""The job store's jobs: queueing, leases, state changes and their events.

A part of `app.store.Store`, on the connection of `app.store.base.StoreBase`.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from app.store.base import StoreBase
from app.store.schema import JOB_COLUMNS, JobRow
from workers.protocol import JobStatus


class Jobs(StoreBase):
    """insert_job, claim, extend_lease, requeue, end_job and the queries on jobs."""

    def insert_job(
        self,
        job_id: str,
        spec: dict[str, Any],
        requirements: dict[str, Any],
        client: str | None,
        now: float,
    ) -> JobRow:
        with self._tx() as db:
            db.execute(
                "INSERT INTO jobs (id, spec, workload, path, requirements, status, attempts, "
                "created_at, updated_at, queued_at, client) VALUES (?,?,?,?,?,?,0,?,?,?,?)",
                (
                    job_id,
                    json.dumps(spec),
                    spec["workload"],
                    spec["path"],
                    json.dumps(requirements),
                    JobStatus.QUEUED.value,
                    now,
                    now,
                    now,
                    client,
                ),
            )
            _event(db, job_id, JobStatus.QUEUED, now, "submitted")
        job = self.get_job(job_id)
        assert job is not None
        return job

    def get_job(self, job_id: str) -> JobRow | None:
        rows = self._read(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return JobRow.from_row(rows[0]) if rows else None

    def list_jobs(
        self,
        workload: str | None = None,
        path: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> tuple[list[JobRow], int]:
        """Newest first, with the number of jobs matching the filters."""
        where, args = [], []
        for column, value in (("workload", workload), ("path", path), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs {clause} ORDER BY created_at DESC LIMIT ?",
            (*args, limit),
        )
        count = self._read(f"SELECT count(*) FROM jobs {clause}", tuple(args))[0][0]
        return [JobRow.from_row(r) for r in rows], int(count)

    def jobs_naming(self, workload: str, value: str, limit: int = 200) -> list[JobRow]:
        """Newest first: jobs of `workload` whose spec holds the string `value` (an uploaded
        file's SHA-256: the jobs that name that file)."""
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE workload = ? AND spec LIKE ? "
            "ORDER BY created_at DESC LIMIT ?",
            (workload, f'%"{value}"%', limit),
        )
        return [JobRow.from_row(r) for r in rows]

    def jobs_with_status(
        self, status: JobStatus, limit: int = 10_000, paths: list[str] | None = None
    ) -> list[JobRow]:
        """Oldest first; only jobs for one of `paths` when given."""
        where, args = "status = ?", [status.value]
        if paths is not None:
            where += f" AND path IN ({','.join('?' for _ in paths)})"
            args += paths
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY created_at LIMIT ?",
            (*args, limit),
        )
        return [JobRow.from_row(r) for r in rows]

    def count_by_status(self) -> dict[str, int]:
        rows = self._read("SELECT status, count(*) FROM jobs GROUP BY status")
        return {r[0]: int(r[1]) for r in rows}

    def count_queued(self, client: str | None = None) -> int:
        """Queued jobs, or only those `client` submitted."""
        args: tuple[str, ...]
        if client is None:
            sql, args = "SELECT count(*) FROM jobs WHERE status = ?", (JobStatus.QUEUED.value,)
        else:
            sql = "SELECT count(*) FROM jobs WHERE status = ? AND client = ?"
            args = (JobStatus.QUEUED.value, client)
        return int(self._read(sql, args)[0][0])

    def queued_requirements(self) -> list[tuple[str, int]]:
        """Each distinct requirements JSON among queued jobs, with how many jobs have it
        (jobs that need the same thing are few kinds, however long the queue)."""
        rows = self._read(
            "SELECT requirements, count(*) FROM jobs WHERE status = ? GROUP BY requirements",
            (JobStatus.QUEUED.value,),
        )
        return [(r[0], int(r[1])) for r in rows]

    def oldest_queued(self, requirements: list[str], limit: int = 8) -> list[JobRow]:
        """The oldest queued jobs whose requirements JSON is one of `requirements`,
        wherever they sit in the queue."""
        if not requirements:
            return []
        marks = ",".join("?" for _ in requirements)
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = ? AND requirements IN ({marks}) "
            "ORDER BY created_at LIMIT ?",
            (JobStatus.QUEUED.value, *requirements, limit),
        )
        return [JobRow.from_row(r) for r in rows]

    def claim(
        self, job_id: str, worker_id: str, lease_id: str, deadline: float, now: float
    ) -> int | None:
        """Lease a queued job to `worker_id` under `lease_id`; the attempt number, or None
        if it was taken."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET status = ?, attempts = attempts + 1, lease_owner = ?, "
                "lease_id = ?, lease_deadline = ?, worker_id = ?, reason = NULL, updated_at = ? "
                "WHERE id = ? AND status = ?",
                (
                    JobStatus.RUNNING.value,
                    worker_id,
                    lease_id,
                    deadline,
                    worker_id,
                    now,
                    job_id,
                    JobStatus.QUEUED.value,
                ),
            )
            if cur.rowcount != 1:
                return None
            db.execute(
                "UPDATE workers SET current_job = ?, last_heartbeat = ? WHERE id = ?",
                (job_id, now, worker_id),
            )
            attempts = db.execute("SELECT attempts FROM jobs WHERE id = ?", (job_id,)).fetchone()
            _event(db, job_id, JobStatus.RUNNING, now, f"leased to worker {worker_id}")
            return int(attempts[0])

    def extend_lease(self, job_id: str, lease_id: str, deadline: float) -> bool:
        """Push the (wall-clock, shown) deadline of lease `lease_id`; False if it ended."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET lease_deadline = ? WHERE id = ? AND status = ? AND lease_id = ?",
                (deadline, job_id, JobStatus.RUNNING.value, lease_id),
            )
            return cur.rowcount == 1

    def running_leases(self) -> list[tuple[str, str]]:
        """(job id, lease id) of every running job."""
        rows = self._read(
            "SELECT id, lease_id FROM jobs WHERE status = ?", (JobStatus.RUNNING.value,)
        )
        return [(r[0], r[1] or "") for r in rows]

    def requeue(
        self,
        job_id: str,
        now: float,
        detail: str,
        count_attempt: bool = True,
        lease_id: str | None = None,
    ) -> bool:
        """Put a running job back in the queue (its lease lost or given back); with
        `lease_id`, only while that lease is the job's current one."""
        less = "" if count_attempt else ", attempts = max(attempts - 1, 0)"
        with self._tx() as db:
            owner = db.execute(
                "SELECT lease_owner FROM jobs WHERE id = ? AND status = ? "
                "AND (? IS NULL OR lease_id = ?)",
                (job_id, JobStatus.RUNNING.value, lease_id, lease_id),
            ).fetchone()
            if owner is None:
                return False
            db.execute(
                f"UPDATE jobs SET status = ?, lease_owner = NULL, lease_deadline = NULL, "
                f"queued_at = ?, updated_at = ?{less} WHERE id = ?",
                (JobStatus.QUEUED.value, now, now, job_id),
            )
            _clear_worker_job(db, owner[0], job_id)
            _event(db, job_id, JobStatus.QUEUED, now, detail)
            return True

    def end_job(
        self,
        job_id: str,
        status: JobStatus,
        reason: str | None,
        now: float,
        *,
        from_statuses: tuple[JobStatus, ...] = (JobStatus.QUEUED, JobStatus.RUNNING),
        stderr_tail: str | None = None,
    ) -> bool:
        """Move a job to a final status; False if it was not in one of `from_statuses`."""
        with self._tx() as db:
            return end_in_tx(db, job_id, status, reason, now, from_statuses, stderr_tail)

    def expired_queued(self, queued_before: float) -> list[JobRow]:
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = ? AND queued_at < ?",
            (JobStatus.QUEUED.value, queued_before),
        )
        return [JobRow.from_row(r) for r in rows]

    def grant_grace(self, deadline: float) -> int:
        """Push every running lease to at least `deadline` (downtime is not the worker's fault)."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET lease_deadline = max(coalesce(lease_deadline, 0), ?) "
                "WHERE status = ?",
                (deadline, JobStatus.RUNNING.value),
            )
            return cur.rowcount

    def job_events(self, job_id: str) -> list[tuple[str, float, str | None]]:
        rows = self._read(
            "SELECT status, at, detail FROM job_events WHERE job_id = ? ORDER BY id", (job_id,)
        )
        return [(r[0], r[1], r[2]) for r in rows]


def _event(db: sqlite3.Connection, job_id: str, status: JobStatus, at: float, detail: str) -> None:
    db.execute(
        "INSERT INTO job_events (job_id, status, at, detail) VALUES (?,?,?,?)",
        (job_id, status.value, at, detail[:2000]),
    )


def _clear_worker_job(db: sqlite3.Connection, worker_id: str | None, job_id: str) -> None:
    if worker_id is not None:
        db.execute(
            "UPDATE workers SET current_job = NULL WHERE id = ? AND current_job = ?",
            (worker_id, job_id),
        )


def end_in_tx(  # noqa: PLR0917 - mirrors Store.end_job inside a transaction
    db: sqlite3.Connection,
    job_id: str,
    status: JobStatus,
    reason: str | None,
    now: float,
    from_statuses: tuple[JobStatus, ...],
    stderr_tail: str | None,
) -> bool:
    marks = ",".join("?" for _ in from_statuses)
    owner = db.execute(
        f"SELECT lease_owner FROM jobs WHERE id = ? AND status IN ({marks})",
        (job_id, *(s.value for s in from_statuses)),
    ).fetchone()
    if owner is None:
        return False
    db.execute(
        "UPDATE jobs SET status = ?, reason = ?, stderr_tail = ?, lease_owner = NULL, "
        "lease_deadline = NULL, updated_at = ? WHERE id = ?",
        (status.value, reason, stderr_tail, now, job_id),
    )
    _clear_worker_job(db, owner[0], job_id)
    _event(db, job_id, status, now, reason or status.value)
    return True
