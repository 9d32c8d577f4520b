"""The job store's jobs: queueing, leases, state changes and their events.

Every change of a job's state is one conditional statement (`UPDATE … WHERE <the state
it must be in> RETURNING …`), so that it holds on PostgreSQL, where replicas write at
once, as it does on SQLite's single writer: two finishers, a finisher and the reaper,
or two reapers can never both move a job. Leasing picks the next job a worker can run
with `FOR UPDATE SKIP LOCKED` on PostgreSQL, so concurrent leases take different jobs
instead of queueing behind one row lock. Every time stored or compared is the database's
clock (`{NOW}`).

Clients take turns (a client is whom admission counts a job under, `jobs.client`): the
next job is the oldest of the client with the fewest jobs running now, and among clients
running as many, of the one whose latest lease is oldest (never served first). So one
client's long queue never stands in front of another's job: that job waits only for a
worker to come free. Two replicas leasing at the same instant may both serve one client
(each skips the other's locked row and takes that client's next job); the turn evens out
at the next lease.

A part of `app.store.Store`, on the backend of `app.store.base.StoreBase`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.store.base import StoreBase, marks, render
from app.store.channel import CHANNEL, status_news_sql
from app.store.dialect import Dialect, Tx
from app.store.schema import JOB_COLUMNS, JobRow
from workers.protocol import JobStatus

EVENT_DETAIL_CHARS = 2000
_RETURNING = f"RETURNING {JOB_COLUMNS}"
_QUEUED, _RUNNING = JobStatus.QUEUED.value, JobStatus.RUNNING.value

INSERT = (
    "INSERT INTO jobs (id, spec, workload, path, requirements, status, attempts, created_at, "
    "updated_at, queued_at, client) VALUES (?, ?, ?, ?, ?, 'queued', 0, {NOW}, {NOW}, {NOW}, ?) "
    + _RETURNING
)
EVENT = "INSERT INTO job_events (job_id, status, at, detail) VALUES (?, ?, {NOW}, ?)"
INSERT_ONE = {
    # PostgreSQL queues the job and writes its event in one statement; SQLite runs
    # INSERT and EVENT one after the other in the admission's transaction.
    "postgresql": (
        f"WITH j AS ({INSERT}), e AS (INSERT INTO job_events (job_id, status, at, detail) "
        "SELECT id, 'queued', {NOW}, 'submitted' FROM j) SELECT * FROM j"
    )
}
CLEAR_WORKER = "UPDATE workers SET current_job = NULL WHERE id = ? AND current_job = ?"

# The next queued job whose requirements JSON is one of {IN}, taken in one statement:
# clients take turns (the module's docstring), and a client's own jobs go oldest first.
# The scalar subquery is evaluated once, so LIMIT 1 holds; SKIP LOCKED lets a concurrent
# lease take the next job instead of waiting for this one's row lock.
_SET_LEASED = (
    "status = 'running', attempts = attempts + 1, lease_owner = ?, lease_id = ?, "
    "lease_deadline = {NOW} + ?, leased_at = {NOW}, worker_id = ?, reason = NULL, "
    "updated_at = {NOW}"
)
_PICK = (
    # Each client with a job this worker can run, with its jobs running now and its
    # latest lease (0: never served); its jobs in that order, the oldest first. On
    # PostgreSQL the row lock applies to the jobs picked, not to the WITH queries.
    "WITH waiting AS (SELECT DISTINCT client FROM jobs "
    "WHERE status = 'queued' AND requirements IN ({IN})), "
    "turns AS MATERIALIZED (SELECT w.client, "
    "(SELECT count(*) FROM jobs r WHERE r.client = w.client AND r.status = 'running') AS running, "
    "coalesce((SELECT max(s.leased_at) FROM jobs s WHERE s.client = w.client), 0) AS served "
    "FROM waiting w) "
    "SELECT q.id FROM jobs q JOIN turns t ON t.client = q.client "
    "WHERE q.status = 'queued' AND q.requirements IN ({IN}) "
    "ORDER BY t.running, t.served, q.created_at, q.id LIMIT 1{SKIP_LOCKED}"
)
LEASE = f"UPDATE jobs SET {_SET_LEASED} WHERE status = 'queued' AND id = ({_PICK}) {_RETURNING}"
LEASED_WORKER = (
    "UPDATE workers SET current_job = ?, last_heartbeat = {NOW}, polling_until = NULL WHERE id = ?"
)
_RUNNING_NEWS = status_news_sql("leased.id", "'running'", "leased.attempts")
LEASE_ONE = {
    # PostgreSQL does the lease, the worker's row and the event in one statement (one
    # round trip, one commit); SQLite runs LEASE, LEASED_WORKER and EVENT in a transaction.
    "postgresql": (
        f"WITH picked AS ({_PICK}), "
        f"leased AS (UPDATE jobs SET {_SET_LEASED} FROM picked WHERE jobs.id = picked.id "
        "AND jobs.status = 'queued' RETURNING "
        + ", ".join(f"jobs.{c.strip()}" for c in JOB_COLUMNS.split(","))
        + "), w AS (UPDATE workers SET current_job = leased.id, last_heartbeat = {NOW}, "
        "polling_until = NULL FROM leased WHERE workers.id = ?), "
        "e AS (INSERT INTO job_events (job_id, status, at, detail) "
        "SELECT id, 'running', {NOW}, ? FROM leased) "
        f"SELECT leased.*, pg_notify('{CHANNEL}', {_RUNNING_NEWS}) FROM leased"
    )
}
"""(It also tells the other replicas that the job runs, with the change.)"""


_HELD = "FROM jobs WHERE id = ? AND status = 'running' AND lease_id = ? AND lease_owner = ?"
HOLDS_AND_TELLS = {
    # PostgreSQL checks a lease and tells the other replicas, when it holds, in one
    # statement (a progress report's one round trip).
    "postgresql": f"SELECT pg_notify('{CHANNEL}', ?) {_HELD}"
}


@dataclass(frozen=True)
class NewJob:
    """A validated job to queue: its spec as JSON-ready data and its requirements."""

    id: str
    spec: dict[str, Any]
    requirements: dict[str, Any]


def insert_in(tx: Tx, dialect: Dialect, job: NewJob, client: str) -> JobRow:
    """Queue `job` for `client` inside the caller's transaction (admission's)."""
    args = (
        job.id,
        json.dumps(job.spec),
        job.spec["workload"],
        job.spec["path"],
        json.dumps(job.requirements),
        client,
    )
    one = INSERT_ONE.get(dialect.name)
    if one is not None:
        return JobRow.from_row(tx.execute(render(dialect, one), args)[0])
    row = tx.execute(render(dialect, INSERT), args)[0]
    event_in(tx, dialect, job.id, JobStatus.QUEUED, "submitted")
    return JobRow.from_row(row)


def event_in(tx: Tx, dialect: Dialect, job_id: str, status: JobStatus, detail: str) -> None:
    tx.execute(render(dialect, EVENT), (job_id, status.value, detail[:EVENT_DETAIL_CHARS]))


def moved_in(tx: Tx, dialect: Dialect, row: tuple[Any, ...], detail: str) -> JobRow:
    """The bookkeeping of a job that left `running` or ended: its worker's current job
    cleared, and the event."""
    job = JobRow.from_row(row)
    if job.worker_id is not None:
        tx.execute(CLEAR_WORKER, (job.worker_id, job.id))
    event_in(tx, dialect, job.id, job.status, detail)
    return job


def requeue_sql(count_attempt: bool) -> str:
    """Put a running job back in the queue while lease `?` is its current one."""
    less = "" if count_attempt else ", attempts = {GREATEST}(attempts - 1, 0)"
    return (
        "UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_deadline = NULL, "
        f"lease_id = NULL, leased_at = NULL, queued_at = {{NOW}}, updated_at = {{NOW}}{less} "
        f"WHERE id = ? AND status = 'running' AND lease_id = ? {_RETURNING}"
    )


def end_sql(from_statuses: Sequence[JobStatus], with_lease: bool) -> str:
    """Move a job to a final status while it is in one of `from_statuses` (and, with
    `with_lease`, while lease `?` is its current one)."""
    lease = " AND lease_id = ?" if with_lease else ""
    return (
        "UPDATE jobs SET status = ?, reason = ?, stderr_tail = ?, lease_owner = NULL, "
        "lease_deadline = NULL, lease_id = NULL, updated_at = {NOW} "
        f"WHERE id = ? AND status IN ({marks(len(from_statuses))}){lease} {_RETURNING}"
    )


class Jobs(StoreBase):
    """Leases and state changes of jobs, and the queries on jobs."""

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
            where += f" AND path IN ({marks(len(paths))})"
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
        if client is None:
            return int(self._read("SELECT count(*) FROM jobs WHERE status = 'queued'")[0][0])
        rows = self._read(
            "SELECT count(*) FROM jobs WHERE status = 'queued' AND client = ?", (client,)
        )
        return int(rows[0][0])

    def queued_requirements(self) -> list[tuple[str, int]]:
        """Each distinct requirements JSON among queued jobs, with how many jobs have it
        (jobs that need the same thing are few kinds, however long the queue)."""
        rows = self._read(
            "SELECT requirements, count(*) FROM jobs WHERE status = 'queued' GROUP BY requirements"
        )
        return [(r[0], int(r[1])) for r in rows]

    def lease(
        self, worker_id: str, requirements: Sequence[str], lease_id: str, lease_s: float
    ) -> JobRow | None:
        """Lease the oldest queued job whose requirements JSON is one of `requirements` to
        `worker_id` under `lease_id`, for `lease_s` seconds; None when there is none.
        Other replicas hear that the job runs from the store, with the change."""
        if not requirements:
            return None
        detail = f"leased to worker {worker_id}"
        in_list = marks(len(requirements))
        one = LEASE_ONE.get(self.dialect.name)
        if one is not None:
            rows = self._read(
                one.replace("{IN}", in_list),
                (*requirements, *requirements, worker_id, lease_id, lease_s, worker_id,
                 worker_id, detail, self.origin),
            )  # fmt: skip
            return JobRow.from_row(rows[0][:-1]) if rows else None
        with self._tx() as tx:
            rows = tx.execute(
                self._sql(LEASE.replace("{IN}", in_list)),
                (worker_id, lease_id, lease_s, worker_id, *requirements, *requirements),
            )
            if not rows:
                return None
            job = JobRow.from_row(rows[0])
            tx.execute(self._sql(LEASED_WORKER), (job.id, worker_id))
            event_in(tx, self.dialect, job.id, JobStatus.RUNNING, detail)
        return job

    def holds_lease(
        self, job_id: str, lease_id: str, worker_id: str, news: str | None = None
    ) -> bool:
        """Whether `lease_id`, held by `worker_id`, is the job's current lease; when it
        is, `news` (a payload of app.store.channel) goes to the other replicas."""
        tells = HOLDS_AND_TELLS.get(self.dialect.name)
        if news is not None and tells is not None:
            return bool(self._read(tells, (news, job_id, lease_id, worker_id)))
        held = bool(self._read(f"SELECT 1 {_HELD}", (job_id, lease_id, worker_id)))
        if held and news is not None:
            self.backend.notify(news)
        return held

    def extend_lease(
        self, job_id: str, lease_id: str, worker_id: str, lease_s: float
    ) -> float | None:
        """Push lease `lease_id`'s deadline to `lease_s` seconds from now; the new
        deadline, or None when that lease is not the job's current one any more."""
        rows = self._read(
            "UPDATE jobs SET lease_deadline = {NOW} + ? WHERE id = ? AND status = 'running' "
            "AND lease_id = ? AND lease_owner = ? RETURNING lease_deadline",
            (lease_s, job_id, lease_id, worker_id),
        )
        return float(rows[0][0]) if rows else None

    def requeue(
        self, job_id: str, lease_id: str, detail: str, *, count_attempt: bool = True
    ) -> JobRow | None:
        """Put a running job back in the queue while `lease_id` is its lease (lost or
        given back); the job as queued, or None when that lease had already ended."""
        with self._tx() as tx:
            rows = tx.execute(self._sql(requeue_sql(count_attempt)), (job_id, lease_id))
            return moved_in(tx, self.dialect, rows[0], detail) if rows else None

    def end_job(
        self,
        job_id: str,
        status: JobStatus,
        reason: str | None,
        *,
        from_statuses: tuple[JobStatus, ...] = (JobStatus.QUEUED, JobStatus.RUNNING),
        lease_id: str | None = None,
        stderr_tail: str | None = None,
    ) -> JobRow | None:
        """Move a job to a final status; the job as ended, or None when it was not in one
        of `from_statuses` (or, with `lease_id`, not under that lease)."""
        sql = self._sql(end_sql(from_statuses, lease_id is not None))
        args = [status.value, reason, stderr_tail, job_id, *(s.value for s in from_statuses)]
        if lease_id is not None:
            args.append(lease_id)
        with self._tx() as tx:
            rows = tx.execute(sql, args)
            return moved_in(tx, self.dialect, rows[0], reason or status.value) if rows else None

    def job_events(self, job_id: str) -> list[tuple[str, float, str | None]]:
        rows = self._read(
            "SELECT status, at, detail FROM job_events WHERE job_id = ? ORDER BY id", (job_id,)
        )
        return [(r[0], float(r[1]), r[2]) for r in rows]
