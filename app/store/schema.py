"""The job store's tables and the rows read from them.

`MIGRATIONS` lists the schema's changes in order; a database's `PRAGMA user_version`
counts those applied, and app.store applies the rest when it opens the file. Add a
migration to change the schema; never edit one that has shipped.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.protocol import JobStatus


def _script(db: sqlite3.Connection, sql: str) -> None:
    """Run `sql` statement by statement inside the caller's transaction.

    (`executescript` would commit first, and a half-applied migration must roll back.)
    """
    for statement in sql.split(";"):
        lines = [line.split("--")[0] for line in statement.splitlines()]
        if "".join(lines).strip():
            db.execute("\n".join(lines))


def _migrate_1(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            spec TEXT NOT NULL,             -- JobSpec JSON as validated
            workload TEXT NOT NULL,
            path TEXT NOT NULL,
            requirements TEXT NOT NULL,     -- Requirements JSON (see app.dispatch)
            status TEXT NOT NULL,
            reason TEXT,
            stderr_tail TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            queued_at REAL NOT NULL,        -- when it last entered the queue
            lease_owner TEXT,
            lease_deadline REAL,
            worker_id TEXT,                 -- the last worker that held it
            client TEXT
        );
        CREATE INDEX jobs_status ON jobs (status, created_at);
        CREATE INDEX jobs_created ON jobs (created_at);
        CREATE TABLE job_events (
            id INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            status TEXT NOT NULL,
            at REAL NOT NULL,
            detail TEXT
        );
        CREATE INDEX job_events_job ON job_events (job_id, id);
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            attempt INTEGER NOT NULL,
            worker_id TEXT,
            result TEXT NOT NULL,           -- RunResult JSON, artifacts capped for inline use
            truncated TEXT NOT NULL,        -- JSON list of artifact names cut for inline use
            valid INTEGER NOT NULL,
            trace_s REAL,
            lower_s REAL,
            compile_s REAL,
            run_s REAL,                     -- the runner's wall time for the whole job
            created_at REAL NOT NULL
        );
        CREATE INDEX runs_job ON runs (job_id);
        CREATE TABLE artifacts (
            run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            text TEXT NOT NULL,             -- full text up to ARTIFACT_MAX_BYTES
            truncated INTEGER NOT NULL,
            PRIMARY KEY (run_id, name)
        );
        CREATE TABLE workers (
            id TEXT PRIMARY KEY,
            name TEXT,
            capabilities TEXT NOT NULL,
            registered_at REAL NOT NULL,
            last_heartbeat REAL NOT NULL,
            current_job TEXT
        );
        """,
    )


def _migrate_2(db: sqlite3.Connection) -> None:
    """Binary files (exported functions, profiler traces, input archives), stored once by
    content hash and attached to jobs by name."""
    _script(
        db,
        """
        CREATE TABLE files (
            sha256 TEXT PRIMARY KEY,
            data BLOB NOT NULL,
            media_type TEXT NOT NULL,
            size INTEGER NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE TABLE job_files (
            job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            sha256 TEXT NOT NULL REFERENCES files (sha256),
            PRIMARY KEY (job_id, name)
        );
        CREATE INDEX job_files_sha ON job_files (sha256);
        """,
    )


def _migrate_3(db: sqlite3.Connection) -> None:
    """Workload matrices: one submission expanded over rows (shapes or parameter values)
    and columns (paths); each cell holds its job, or the reason it has none."""
    _script(
        db,
        """
        CREATE TABLE matrices (
            id TEXT PRIMARY KEY,
            spec TEXT NOT NULL,             -- MatrixSpec JSON as validated
            created_at REAL NOT NULL
        );
        CREATE INDEX matrices_created ON matrices (created_at);
        CREATE TABLE matrix_cells (
            matrix_id TEXT NOT NULL REFERENCES matrices (id) ON DELETE CASCADE,
            row INTEGER NOT NULL,
            col INTEGER NOT NULL,
            job_id TEXT REFERENCES jobs (id),
            reason TEXT,                    -- why the cell has no job
            PRIMARY KEY (matrix_id, row, col)
        );
        """,
    )


def _migrate_4(db: sqlite3.Connection) -> None:
    """Leases carry a random id that every report must present; jobs are counted per
    client at admission; files remember when a job last used them (for retention)."""
    _script(
        db,
        """
        ALTER TABLE jobs ADD COLUMN lease_id TEXT;
        CREATE INDEX jobs_client ON jobs (client, status);
        ALTER TABLE files ADD COLUMN used_at REAL;
        UPDATE files SET used_at = created_at;
        CREATE INDEX runs_created ON runs (created_at);
        """,
    )


FILE_CHUNK_BYTES = 1024 * 1024
"""The size of a stored file's chunks (app.store.files.CHUNK_BYTES)."""


def _migrate_5(db: sqlite3.Connection) -> None:
    """Files kept in chunks of 1 MiB (app.store.files), so that neither storing a file
    nor reading it back holds it whole in memory; existing files are moved over."""
    _script(
        db,
        """
        CREATE TABLE file_blobs (
            id INTEGER PRIMARY KEY,
            started_at REAL NOT NULL        -- when its writing started
        );
        CREATE TABLE file_chunks (
            blob INTEGER NOT NULL REFERENCES file_blobs (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (blob, seq)
        );
        ALTER TABLE files ADD COLUMN blob INTEGER REFERENCES file_blobs (id);
        """,
    )
    shas = [r[0] for r in db.execute("SELECT sha256 FROM files").fetchall()]
    for sha in shas:
        size = int(db.execute("SELECT size FROM files WHERE sha256 = ?", (sha,)).fetchone()[0])
        blob = db.execute(
            "INSERT INTO file_blobs (started_at) VALUES (strftime('%s', 'now'))"
        ).lastrowid
        for seq in range(max(1, -(-size // FILE_CHUNK_BYTES))):
            # substr() on a blob counts bytes from 1; one chunk in memory at a time.
            db.execute(
                "INSERT INTO file_chunks (blob, seq, data) SELECT ?, ?, "
                "substr(data, ?, ?) FROM files WHERE sha256 = ?",
                (blob, seq, seq * FILE_CHUNK_BYTES + 1, FILE_CHUNK_BYTES, sha),
            )
        db.execute("UPDATE files SET blob = ? WHERE sha256 = ?", (blob, sha))
    db.execute("ALTER TABLE files DROP COLUMN data")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _migrate_1,
    _migrate_2,
    _migrate_3,
    _migrate_4,
    _migrate_5,
]
"""Schema migrations in order; the database's user_version counts those applied."""

SCHEMA_VERSION = len(MIGRATIONS)

JOB_COLUMNS = (
    "id, spec, workload, path, requirements, status, reason, stderr_tail, attempts, "
    "created_at, updated_at, queued_at, lease_owner, lease_deadline, worker_id, client, lease_id"
)


@dataclass(frozen=True)
class JobRow:
    """A job as stored."""

    id: str
    spec: dict[str, Any]
    workload: str
    path: str
    requirements: dict[str, Any]
    status: JobStatus
    reason: str | None
    stderr_tail: str | None
    attempts: int
    created_at: float
    updated_at: float
    queued_at: float
    lease_owner: str | None
    lease_deadline: float | None
    worker_id: str | None
    client: str | None
    lease_id: str | None = None
    """The current lease's random id while running (reports must present it)."""

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> JobRow:
        return cls(
            id=row["id"],
            spec=json.loads(row["spec"]),
            workload=row["workload"],
            path=row["path"],
            requirements=json.loads(row["requirements"]),
            status=JobStatus(row["status"]),
            reason=row["reason"],
            stderr_tail=row["stderr_tail"],
            attempts=row["attempts"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            queued_at=row["queued_at"],
            lease_owner=row["lease_owner"],
            lease_deadline=row["lease_deadline"],
            worker_id=row["worker_id"],
            client=row["client"],
            lease_id=row["lease_id"],
        )


@dataclass(frozen=True)
class RunRow:
    """A stored run: the result JSON (artifacts capped) and which artifacts were cut."""

    id: int
    job_id: str
    attempt: int
    worker_id: str | None
    result: str
    truncated: list[str]
    run_s: float | None
    created_at: float
    artifact_names: list[str]


@dataclass(frozen=True)
class WorkerRow:
    """A registered worker."""

    id: str
    name: str | None
    capabilities: dict[str, Any]
    registered_at: float
    last_heartbeat: float
    current_job: str | None


@dataclass(frozen=True)
class NewRun:
    """What `Store.finish_job` stores for a completed job."""

    result_json: str
    truncated: list[str]
    valid: bool
    stage_seconds: dict[str, float | None]
    run_s: float | None
    artifacts: dict[str, tuple[str, bool]]  # name -> (text, cut at ARTIFACT_MAX_BYTES)
