"""The PostgreSQL backend: the shared store of several `boundary serve` replicas.

A psycopg 3 connection pool per replica. Connections are in autocommit, so a read (or a
single conditional statement) is one round trip; a write of several statements runs in
an explicit transaction (READ COMMITTED). The store's API stays synchronous and is called
from the event loop, as with SQLite; what keeps a stalled database from freezing a
replica for good is that every wait is bounded (`Timeouts`): connecting, waiting for a
pooled connection, waiting for a lock and running one statement. Past a bound the call
raises and the request fails, instead of hanging.

Every session is set up through its start-up options, which cost no round trip:
`search_path=public` (the tables live there, whatever schemas the role's own search path
names), the timeouts, and, unless durable commits are asked for,
`synchronous_commit=off`, which matches SQLite's `synchronous=NORMAL`: a crash of the
database host may lose the last few hundred milliseconds of commits, never consistency.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from app.store.channel import CHANNEL
from app.store.dialect import POSTGRES, Row, clean_text, lock_key
from app.store.url import Timeouts

log = logging.getLogger("boundary.store")

PROBE_S = 5.0
"""A listening connection quiet this long is asked `SELECT 1` (is it still there?)."""

_SQL_CACHE: dict[str, str] = {}


def _pg(statement: str) -> str:
    """`statement` with `?` placeholders as psycopg's `%s` (a literal % doubled), converted
    once per text."""
    out = _SQL_CACHE.get(statement)
    if out is None:
        out = _SQL_CACHE[statement] = statement.replace("%", "%%").replace("?", "%s")
    return out


def connection_kwargs(timeouts: Timeouts, synchronous_commit: bool) -> dict[str, Any]:
    """What every connection of a replica is opened with (the pool's and the listener's)."""
    return {
        "autocommit": True,
        "connect_timeout": max(1, round(timeouts.connect_s)),
        "options": timeouts.options(synchronous_commit),
        "application_name": "boundary",
        # A database host that vanishes without closing the connection is found in about
        # 10 + 3 × 5 seconds instead of the system's two hours.
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }


class _PgTx:
    """A transaction on one connection, begun with its first statement: BEGIN travels
    with a first advisory lock in one round trip (a simple query, no parameters)."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self._conn = conn
        self.begun = False
        self.pending: list[sql.Composable] = []

    def _begin(self, then: str | None = None) -> None:
        if not self.begun:
            self._conn.execute(f"BEGIN; {then}" if then else "BEGIN")
            self.begun = True
        elif then:
            self._conn.execute(then)

    def execute(self, statement: str, args: Sequence[Any] = ()) -> list[Row]:
        self._begin()
        cur = self._conn.execute(_pg(statement), clean_text(args))
        return cur.fetchall() if cur.description is not None else []

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        self._begin()
        with self._conn.cursor() as cur:
            cur.executemany(_pg(statement), [clean_text(r) for r in rows])

    def lock(self, name: str) -> None:
        self._begin(f"SELECT pg_advisory_xact_lock({lock_key(name)})")

    def later(self, statement: str, args: Sequence[Any] = ()) -> None:
        # Parameters as literals: a query without parameters may hold several statements.
        parts = statement.split("?")
        composed: list[sql.Composable] = [sql.SQL(parts[0])]
        for value, text in zip(clean_text(args), parts[1:], strict=True):
            composed += [sql.Literal(value), sql.SQL(text)]
        self.pending.append(sql.Composed([*composed, sql.SQL("; ")]))

    def notify(self, payload: str) -> None:
        self.later("SELECT pg_notify(?, ?)", (CHANNEL, payload))

    def commit(self) -> None:
        """COMMIT, with the statements left for it, in one round trip."""
        if self.pending:
            begin = [] if self.begun else [sql.SQL("BEGIN; ")]
            self._conn.execute(sql.Composed([*begin, *self.pending, sql.SQL("COMMIT")]))
        elif self.begun:
            self._conn.execute("COMMIT")


class PostgresBackend:
    """A PostgreSQL database through a pool (see the module's docstring)."""

    dialect = POSTGRES

    def __init__(
        self,
        url: str,
        shown: str,
        *,
        timeouts: Timeouts | None = None,
        pool_size: int = 4,
        synchronous_commit: bool = False,
    ) -> None:
        self.url = url
        self.where = shown
        self.timeouts = timeouts or Timeouts()
        self.synchronous_commit = synchronous_commit
        self.pool: psycopg_pool.ConnectionPool[psycopg.Connection[Row]] = (
            psycopg_pool.ConnectionPool(
                url,
                min_size=1,
                max_size=max(2, pool_size),
                kwargs=connection_kwargs(self.timeouts, synchronous_commit),
                timeout=self.timeouts.connect_s,
                # Keep trying to reconnect while the database is away (and /readyz says so).
                reconnect_timeout=float("inf"),
                name="boundary",
                open=False,
            )
        )
        self.pool.open(wait=False)

    @contextmanager
    def _connection(self, timeout_s: float | None = None) -> Iterator[psycopg.Connection[Row]]:
        with self.pool.connection(timeout=timeout_s) as conn:
            yield conn

    @contextmanager
    def tx(self) -> Iterator[_PgTx]:
        with self._connection() as conn:
            tx = _PgTx(conn)
            try:
                yield tx
            except BaseException:
                if tx.begun and not conn.closed:
                    with suppress(psycopg.Error):  # a broken connection rolled back already
                        conn.execute("ROLLBACK")
                raise
            tx.commit()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        # One retry when the pooled connection turns out to be dead (the database
        # restarted since it was last used); a read is safe to repeat.
        for attempt in (1, 2):
            try:
                with self._connection() as conn:
                    cur = conn.execute(_pg(sql), clean_text(args))
                    return cur.fetchall() if cur.description is not None else []
            except psycopg.OperationalError:
                if attempt == 2 or not _is_read(sql):
                    raise
        raise AssertionError("unreachable")

    def read_bytes(self, sql: str, args: Sequence[Any]) -> bytes | None:
        with self._connection() as conn:
            row = conn.execute(_pg(sql), clean_text(args), binary=True).fetchone()
        return bytes(row[0]) if row is not None else None

    def ping(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                with self._connection(left) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg_pool.PoolTimeout:
                return False
            except psycopg.Error:
                # A connection left over from before the database went away: the pool
                # drops it; try a fresh one while time remains.
                time.sleep(min(0.05, max(0.0, left)))

    @contextmanager
    def try_exclusive(self, name: str) -> Iterator[bool]:
        """A session-level advisory lock on a connection held for the block: a replica
        that dies loses it with its connection, so a crash never leaves it taken."""
        key = lock_key(name)
        with self._connection() as conn:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            taken = bool(row and row[0])
            try:
                yield taken
            finally:
                if taken and not conn.closed:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def notify(self, payload: str) -> None:
        """Send on the channel. News that cannot be sent is logged and dropped: what it
        told is in the store already (a status) or replaced by the next (progress), and
        the change that caused it has been committed, so it must not fail now."""
        try:
            with self._connection() as conn:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
        except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
            log.warning("could not tell the other replicas (%s)", error)

    async def listen(self, heard: Callable[[str], None], reconnected: Callable[[], None]) -> None:
        """LISTEN on one dedicated connection outside the pool. Whenever no notification
        came for PROBE_S it runs `SELECT 1`, so a connection that died silently is found;
        a lost one is opened again with a growing pause (0.1 s doubling to 5 s)."""
        kwargs = connection_kwargs(self.timeouts, self.synchronous_commit)
        pause = 0.1
        first = True
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, **kwargs) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    pause = 0.1
                    if not first:
                        reconnected()
                    first = False
                    while True:
                        quiet = True
                        async for message in conn.notifies(timeout=PROBE_S):
                            quiet = False
                            heard(message.payload)
                        if quiet:
                            await conn.execute("SELECT 1")
            except psycopg.Error as error:
                log.warning("lost the notification channel (%s); again in %.1f s", error, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)

    def maintain(self) -> None:
        """Nothing: autovacuum reclaims what retention deleted."""

    def close(self) -> None:
        self.pool.close()


def _is_read(sql: str) -> bool:
    return sql.lstrip().upper().startswith("SELECT")
