"""A full disk, told apart from every other failure: the server answers 507 "the server's
disk is full" and keeps the connection, instead of a 500 that resets it.

A write that hits ENOSPC (an upload spooled to disk), SQLite's "database or disk is
full" and PostgreSQL's disk_full (SQLSTATE 53100) all say so, directly or through the
exception they were raised from. Handled as exceptions of their own kinds (Starlette's
ExceptionMiddleware, inside the server-error one), they are answered and not re-raised,
so uvicorn does not close a kept-alive connection as it does after a 500.
"""

from __future__ import annotations

import errno
import sqlite3

DISK_FULL = "the server's disk is full"
SQLITE_FULL = 13
PG_DISK_FULL = "53100"
"""SQLSTATE disk_full (psycopg.errors.DiskFull), read without importing psycopg."""
KINDS: tuple[type[Exception], ...] = (OSError, sqlite3.Error)
"""Exception kinds that may mean a full disk (a database driver's own may be added)."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, says the disk is full."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(current, sqlite3.Error) and (
            getattr(current, "sqlite_errorcode", None) == SQLITE_FULL
            or "database or disk is full" in str(current)
        ):
            return True
        if getattr(current, "sqlstate", None) == PG_DISK_FULL:
            return True
        current = current.__cause__ or current.__context__
    return False
