"""The job store: one SQLite file in WAL mode holding jobs, their state changes, runs,
full artifact text and workers.

Concurrency: one connection, opened with `check_same_thread=False` and guarded by a
lock; every method is a short synchronous transaction called straight from the event
loop. Each statement touches a handful of indexed rows in a local file (tens of
microseconds; a result with large IR text a few milliseconds), which costs less than a
hop to a thread pool and keeps the order of state changes exactly the order in which
the dispatcher decided them: the dispatcher reads and writes without an `await` in
between, so with uvicorn's single event loop no two requests interleave inside a
decision. The lock makes the store safe to call from other threads too (tests, tools).

Durability: WAL with `synchronous=NORMAL` survives a crash of the process (what a
server restart is); only a power failure can lose the last transactions.

The schema is versioned by `PRAGMA user_version` and the ordered list `MIGRATIONS`:
a database at version v gets migrations v+1.. applied, each in its own transaction.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.matrices.store import MatricesMixin
from app.store_files import FilesMixin
from app.store_schema import (
    JOB_COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    JobRow,
    NewRun,
    RunRow,
    WorkerRow,
)
from workers.protocol import JobStatus

__all__ = ["SCHEMA_VERSION", "JobRow", "NewRun", "RunRow", "Store", "WorkerRow", "now"]


class Store(FilesMixin, MatricesMixin):
    """The SQLite job store. Create with `Store.open(path)`; close when done."""

    def __init__(self, db: sqlite3.Connection, retain_runs: int) -> None:
        self._db = db
        self._lock = threading.Lock()
        self.retain_runs = retain_runs

    @classmethod
    def open(cls, path: Path, retain_runs: int = 5000) -> Store:
        """Open (creating if needed) the database at `path` and bring its schema up to date."""
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        store = cls(db, retain_runs)
        store._migrate()
        return store

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _migrate(self) -> None:
        with self._lock:
            version: int = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"the database schema is version {version}, newer than this server's "
                f"{SCHEMA_VERSION}: upgrade the server"
            )
        for number in range(version, SCHEMA_VERSION):
            with self._tx() as db:
                MIGRATIONS[number](db)
                db.execute(f"PRAGMA user_version = {number + 1}")

    def schema_version(self) -> int:
        return int(self._read("PRAGMA user_version")[0][0])

    def ping(self) -> bool:
        """True when the database answers a query."""
        try:
            self._read("SELECT 1")
        except sqlite3.Error:
            return False
        return True

    # --- jobs ------------------------------------------------------------------------

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

    def overdue_running(self, leased_before: float) -> list[JobRow]:
        """Running jobs leased (or last re-leased) before `leased_before`."""
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = ? AND updated_at < ?",
            (JobStatus.RUNNING.value, leased_before),
        )
        return [JobRow.from_row(r) for r in rows]

    def count_by_status(self) -> dict[str, int]:
        rows = self._read("SELECT status, count(*) FROM jobs GROUP BY status")
        return {r[0]: int(r[1]) for r in rows}

    def count_queued(self) -> int:
        rows = self._read("SELECT count(*) FROM jobs WHERE status = ?", (JobStatus.QUEUED.value,))
        return int(rows[0][0])

    def claim(self, job_id: str, worker_id: str, deadline: float, now: float) -> int | None:
        """Lease a queued job to `worker_id`; the attempt number, or None if it was taken."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET status = ?, attempts = attempts + 1, lease_owner = ?, "
                "lease_deadline = ?, worker_id = ?, reason = NULL, updated_at = ? "
                "WHERE id = ? AND status = ?",
                (
                    JobStatus.RUNNING.value,
                    worker_id,
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

    def extend_lease(self, job_id: str, worker_id: str, deadline: float, now: float) -> bool:
        """Push the deadline of a lease `worker_id` holds; False if it holds none on the job."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET lease_deadline = ? "
                "WHERE id = ? AND status = ? AND lease_owner = ?",
                (deadline, job_id, JobStatus.RUNNING.value, worker_id),
            )
            return cur.rowcount == 1

    def requeue(self, job_id: str, now: float, detail: str, count_attempt: bool = True) -> bool:
        """Put a running job back in the queue (its lease lost or given back)."""
        less = "" if count_attempt else ", attempts = max(attempts - 1, 0)"
        with self._tx() as db:
            owner = db.execute(
                "SELECT lease_owner FROM jobs WHERE id = ? AND status = ?",
                (job_id, JobStatus.RUNNING.value),
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
            return _end(db, job_id, status, reason, now, from_statuses, stderr_tail)

    def finish_job(
        self, job_id: str, attempt: int, worker_id: str, run: NewRun, now: float
    ) -> bool:
        """Store a run and mark its job done, in one transaction; False if already final."""
        with self._tx() as db:
            if not _end(
                db,
                job_id,
                JobStatus.DONE,
                None,
                now,
                (JobStatus.QUEUED, JobStatus.RUNNING),
                None,
            ):
                return False
            stages = run.stage_seconds
            cur = db.execute(
                "INSERT INTO runs (job_id, attempt, worker_id, result, truncated, valid, "
                "trace_s, lower_s, compile_s, run_s, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    attempt,
                    worker_id,
                    run.result_json,
                    json.dumps(run.truncated),
                    int(run.valid),
                    stages.get("trace"),
                    stages.get("lower"),
                    stages.get("compile"),
                    run.run_s,
                    now,
                ),
            )
            run_id = cur.lastrowid
            db.executemany(
                "INSERT INTO artifacts (run_id, name, text, truncated) VALUES (?,?,?,?)",
                [(run_id, name, text, int(cut)) for name, (text, cut) in run.artifacts.items()],
            )
            # Keep the newest `retain_runs` runs; artifacts go with them (ON DELETE CASCADE).
            db.execute(
                "DELETE FROM runs WHERE id <= "
                "(SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?)",
                (self.retain_runs,),
            )
            return True

    def expired_leases(self, now: float) -> list[JobRow]:
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = ? AND lease_deadline < ?",
            (JobStatus.RUNNING.value, now),
        )
        return [JobRow.from_row(r) for r in rows]

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

    # --- runs and artifacts -------------------------------------------------------------

    def get_run(self, job_id: str) -> RunRow | None:
        rows = self._read(
            "SELECT id, job_id, attempt, worker_id, result, truncated, run_s, created_at "
            "FROM runs WHERE job_id = ? ORDER BY id DESC LIMIT 1",
            (job_id,),
        )
        if not rows:
            return None
        r = rows[0]
        names = self._read("SELECT name FROM artifacts WHERE run_id = ? ORDER BY name", (r[0],))
        return RunRow(
            id=r[0],
            job_id=r[1],
            attempt=r[2],
            worker_id=r[3],
            result=r[4],
            truncated=json.loads(r[5]),
            run_s=r[6],
            created_at=r[7],
            artifact_names=[n[0] for n in names],
        )

    def get_artifact(self, job_id: str, name: str) -> tuple[str, bool] | None:
        """The full text of a run's artifact, and whether it was cut at the storage cap."""
        rows = self._read(
            "SELECT a.text, a.truncated FROM artifacts a JOIN runs r ON r.id = a.run_id "
            "WHERE r.job_id = ? AND a.name = ? ORDER BY r.id DESC LIMIT 1",
            (job_id, name),
        )
        return (rows[0][0], bool(rows[0][1])) if rows else None

    def stage_seconds(self) -> dict[str, list[float]]:
        """Every stored run's trace, lower and compile seconds, for metrics."""
        rows = self._read("SELECT trace_s, lower_s, compile_s FROM runs")
        out: dict[str, list[float]] = {"trace": [], "lower": [], "compile": []}
        for row in rows:
            for name, value in zip(("trace", "lower", "compile"), row, strict=True):
                if value is not None:
                    out[name].append(float(value))
        return out

    def count_runs(self) -> int:
        return int(self._read("SELECT count(*) FROM runs")[0][0])

    # --- workers ---------------------------------------------------------------------

    def upsert_worker(
        self, worker_id: str, name: str | None, capabilities: dict[str, Any], now: float
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO workers (id, name, capabilities, registered_at, last_heartbeat) "
                "VALUES (?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                "capabilities = excluded.capabilities, last_heartbeat = excluded.last_heartbeat",
                (worker_id, name, json.dumps(capabilities), now, now),
            )

    def touch_worker(self, worker_id: str, now: float) -> None:
        with self._tx() as db:
            db.execute("UPDATE workers SET last_heartbeat = ? WHERE id = ?", (now, worker_id))

    def list_workers(self, seen_since: float = 0.0) -> list[WorkerRow]:
        rows = self._read(
            "SELECT id, name, capabilities, registered_at, last_heartbeat, current_job "
            "FROM workers WHERE last_heartbeat >= ? ORDER BY registered_at",
            (seen_since,),
        )
        return [WorkerRow(r[0], r[1], json.loads(r[2]), r[3], r[4], r[5]) for r in rows]


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


def _end(  # noqa: PLR0917 - a private helper mirroring Store.end_job
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


def now() -> float:
    """Wall-clock seconds: stored times must survive a restart, so no monotonic clock."""
    return time.time()
