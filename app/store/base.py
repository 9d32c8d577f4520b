"""What every part of the job store stands on: one SQLite connection, the lock that
guards it, and the two ways a query uses them (one write transaction, one read).

Each part of the store (jobs, runs, files, retention, matrices) is a `StoreBase` that
adds its own queries; `app.store.Store` is all of them over one connection.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_RETAIN_RUNS = 5000


class StoreBase:
    """A connection and its lock, and how many runs the store keeps."""

    def __init__(self, db: sqlite3.Connection, retain_runs: int = DEFAULT_RETAIN_RUNS) -> None:
        self._db = db
        self._lock = threading.Lock()
        self.retain_runs = retain_runs

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
        """The rows of one read, under the lock."""
        with self._lock:
            return self._db.execute(sql, args).fetchall()


def now() -> float:
    """Wall-clock seconds: stored times must survive a restart, so no monotonic clock."""
    return time.time()
