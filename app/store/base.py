"""What every part of the job store stands on: a backend (SQLite or PostgreSQL), its
dialect, and the two ways a query uses it (one write transaction, one statement).

Each part of the store (jobs, workers, runs, files, limits, retention, matrices) is a
`StoreBase` that adds its own queries; `app.store.Store` is all of them over one backend.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from functools import cache
from typing import Any

from app.store.dialect import Backend, Dialect, Row, Tx

DEFAULT_RETAIN_RUNS = 5000


@cache
def render(dialect: Dialect, template: str) -> str:
    """`template` in `dialect` (cached: the store's statements are a fixed set)."""
    return dialect.sql(template)


class StoreBase:
    """A backend, and how many runs the store keeps."""

    def __init__(self, backend: Backend, retain_runs: int = DEFAULT_RETAIN_RUNS) -> None:
        self.backend = backend
        self.dialect = backend.dialect
        self.retain_runs = retain_runs
        self.origin = secrets.token_hex(6)
        """This replica's name on the channel between replicas (app.store.channel)."""

    def _sql(self, template: str) -> str:
        return render(self.dialect, template)

    def _tx(self) -> AbstractContextManager[Tx]:
        """One write transaction."""
        return self.backend.tx()

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """The rows of one statement, which commits on its own (`sql` is a template)."""
        return self.backend.execute(self._sql(sql), args)

    def db_now(self) -> float:
        """The database's clock: seconds since the epoch."""
        return float(self._read("SELECT {NOW}")[0][0])


def now() -> float:
    """This machine's wall clock. Stored times come from the database's clock ({NOW});
    this one is for what a page shows of them, relative to now."""
    return time.time()


def marks(n: int) -> str:
    """`?, ?, …` for an IN list of `n` values."""
    return ",".join("?" for _ in range(n))
