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

import sqlite3
from pathlib import Path

from app.store.base import DEFAULT_RETAIN_RUNS, StoreBase, now
from app.store.files import Files
from app.store.jobs import Jobs
from app.store.matrices import Matrices
from app.store.retention import Pruned, Retention
from app.store.runs import Runs
from app.store.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    JobRow,
    NewRun,
    RunRow,
    WorkerRow,
)

WAL_LIMIT_BYTES = 4 * 1024 * 1024

__all__ = [
    "SCHEMA_VERSION",
    "JobRow",
    "NewRun",
    "Pruned",
    "RunRow",
    "Store",
    "StoreBase",
    "WorkerRow",
    "now",
]


class Store(Jobs, Runs, Retention, Files, Matrices):
    """The SQLite job store: every part's queries over one connection (see
    app.store.base). Create with `Store.open(path)`; close when done."""

    @classmethod
    def open(cls, path: Path, retain_runs: int = DEFAULT_RETAIN_RUNS) -> Store:
        """Open (creating if needed) the database at `path` and bring its schema up to date."""
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
        db.row_factory = sqlite3.Row
        # Only a new file takes this (before its first table): freed pages then go back
        # to the file system when retention prunes (app.store.retention).
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        # After a checkpoint the WAL file is cut back to this, so one large write does
        # not leave it large for good.
        db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        store = cls(db, retain_runs)
        store._migrate()
        return store

    def close(self) -> None:
        with self._lock:
            self._db.close()

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
