"""What a backend of the job store is, and the little that differs between SQLite's SQL
and PostgreSQL's.

Every concern of the store (jobs, workers, runs, files, limits, retention, matrices)
writes its SQL once, with `?` placeholders and a few tokens that a `Dialect` fills in:

- `{NOW}`: the database's clock, float seconds since the epoch. Every stored or compared
  time uses it, so replicas' clocks never meet (on SQLite the database is this machine).
- `{SKIP_LOCKED}`: after a SELECT that picks rows to change: lock them and skip rows
  another transaction holds (PostgreSQL); empty on SQLite, whose BEGIN IMMEDIATE already
  makes every write transaction the only one.
- `{FOR_UPDATE}`: after a SELECT whose rows the transaction will change: lock them
  (PostgreSQL; a row changed meanwhile is re-checked against the WHERE); empty on SQLite.
- `{GREATEST}` / `{LEAST}`: the larger / smaller of two values (SQLite's max()/min()).

A statement that differs as a whole lives beside its shared siblings in its concern's
module, as one entry per dialect; callers never ask which backend they are on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Dialect:
    """The tokens that differ between the backends inside otherwise shared SQL."""

    name: str
    now: str
    skip_locked: str
    for_update: str
    greatest: str
    least: str

    def sql(self, template: str) -> str:
        """`template` with this dialect's tokens filled in."""
        return (
            template.replace("{NOW}", self.now)
            .replace("{SKIP_LOCKED}", self.skip_locked)
            .replace("{FOR_UPDATE}", self.for_update)
            .replace("{GREATEST}", self.greatest)
            .replace("{LEAST}", self.least)
        )


SQLITE = Dialect(
    name="sqlite",
    # A function the SQLite backend registers on its connection: the machine's wall
    # clock with microseconds (julianday('now') has milliseconds only).
    now="boundary_now()",
    skip_locked="",
    for_update="",
    greatest="max",
    least="min",
)
POSTGRES = Dialect(
    name="postgresql",
    # clock_timestamp(), not now(): now() is when the transaction began. extract() is
    # numeric since PostgreSQL 14 (a Decimal in Python), hence the cast.
    now="(extract(epoch from clock_timestamp())::float8)",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    for_update=" FOR UPDATE",
    greatest="greatest",
    least="least",
)


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for the advisory lock called `name`."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def clean_text(args: Sequence[Any]) -> tuple[Any, ...]:
    """`args` with NUL characters in strings (and in lists of strings) replaced by U+FFFD.

    PostgreSQL's text cannot hold NUL (it refuses the statement), and a worker's text
    (IR, stderr, reasons) may contain one; both backends store the same replacement so
    that they read back alike. Bytes are left alone.
    """
    return tuple(_clean(a) for a in args)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


class Tx(Protocol):
    """One open write transaction."""

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """Run one statement; its rows (empty for a statement without RETURNING)."""
        ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def lock(self, name: str) -> None:
        """Take the lock `name` until the transaction ends (PostgreSQL: an advisory
        transaction lock; SQLite: nothing, its transaction is the only writer)."""
        ...

    def later(self, sql: str, args: Sequence[Any] = ()) -> None:
        """Run a statement whose rows nobody reads, at the latest when the transaction
        commits (PostgreSQL sends it with COMMIT, in one round trip)."""
        ...

    def notify(self, payload: str) -> None:
        """Send `payload` to every replica listening once the transaction commits (never
        if it rolls back); nothing on SQLite."""
        ...


class Backend(Protocol):
    """Connections, transactions and the database-wide services the store needs."""

    dialect: Dialect
    where: str
    """The database, as a person would name it (a path or a URL without password)."""

    def tx(self) -> AbstractContextManager[Tx]:
        """One write transaction (rolled back when the block raises)."""
        ...

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """The rows of one query (or one statement that commits on its own)."""
        ...

    def read_bytes(self, sql: str, args: Sequence[Any]) -> bytes | None:
        """The first column of the first row of one query, as bytes; None for no row."""
        ...

    def ping(self, timeout_s: float) -> bool:
        """True when the database answers a query within `timeout_s`."""
        ...

    def try_exclusive(self, name: str) -> AbstractContextManager[bool]:
        """Whether this process took the lock `name` (held until the block ends);
        False when another replica holds it."""
        ...

    def notify(self, payload: str) -> None:
        """Send `payload` to every replica listening (nothing on SQLite: one server)."""
        ...

    async def listen(self, heard: Callable[[str], None], reconnected: Callable[[], None]) -> None:
        """Call `heard` with every payload any replica sends, until cancelled; after a
        lost connection is back, call `reconnected` (what was sent meanwhile is lost).
        Returns at once on SQLite: there is nobody else to hear."""
        ...

    def maintain(self) -> None:
        """Housekeeping after retention deleted rows (SQLite gives pages back)."""
        ...

    def close(self) -> None: ...
