"""The SQLite backend: one file in WAL mode, the embedded default.

One connection, opened with `check_same_thread=False` and guarded by a lock; every
store method is a short synchronous transaction, called straight from the event loop
(a statement on a handful of indexed rows in a local file costs tens of microseconds,
less than a hop to a thread pool). Writes are `BEGIN IMMEDIATE`, so each write
transaction is the only one: the store's conditional statements are written to be
correct without that (PostgreSQL gives no such guarantee), but here it also holds.

Durability: WAL with `synchronous=NORMAL` survives a crash of the process (what a server
restart is); a power failure can lose the last transactions, never corrupt the file.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.store.dialect import SQLITE, Row, clean_text

WAL_LIMIT_BYTES = 4 * 1024 * 1024
_wall_clock = time.time  # bound once: the database's clock is the machine's


class _SQLiteTx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return self._db.execute(sql, clean_text(args)).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._db.executemany(sql, [clean_text(r) for r in rows])

    def lock(self, name: str) -> None:
        """Nothing to take: BEGIN IMMEDIATE made this the only write transaction."""

    def later(self, sql: str, args: Sequence[Any] = ()) -> None:
        self.execute(sql, args)

    def notify(self, payload: str) -> None:
        """Nothing to send: one server on the file."""


class SQLiteBackend:
    """A SQLite file (see the module's docstring)."""

    dialect = SQLITE

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.where = str(path)
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
        db.create_function("boundary_now", 0, _wall_clock, deterministic=False)
        # Only a new file takes this (before its first table): freed pages then go back
        # to the file system when retention prunes (app.store.retention).
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        # After a checkpoint the WAL file is cut back to this, so one large write does
        # not leave it large for good.
        db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        self._db = db
        self._lock = threading.Lock()

    @contextmanager
    def tx(self) -> Iterator[_SQLiteTx]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteTx(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with self._lock:
            return self._db.execute(sql, clean_text(args)).fetchall()

    def read_bytes(self, sql: str, args: Sequence[Any]) -> bytes | None:
        rows = self.execute(sql, args)
        return bytes(rows[0][0]) if rows else None

    def ping(self, timeout_s: float) -> bool:
        try:
            self.execute("SELECT 1")
        except sqlite3.Error:
            return False
        return True

    @contextmanager
    def try_exclusive(self, name: str) -> Iterator[bool]:
        """Always taken: a SQLite file has one server (what else would hold it?)."""
        yield True

    def notify(self, payload: str) -> None:
        """Nothing to send: the one server already delivered it to its subscribers."""

    async def listen(self, heard: Callable[[str], None], reconnected: Callable[[], None]) -> None:
        """Nothing to hear: this server is the only one on its file."""

    def maintain(self) -> None:
        """Give pages freed by deletions back to the file system."""
        with self._lock:
            self._db.execute("PRAGMA incremental_vacuum").fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()
