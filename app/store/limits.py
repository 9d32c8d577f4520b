"""Admission counted in the job store, so that every replica shares every limit.

`admitting(client)` opens one transaction under the admission lock (on PostgreSQL an
advisory transaction lock, released at commit or rollback and when a replica dies; on
SQLite, BEGIN IMMEDIATE already makes it the only writer). Inside it, app.queue.admission
reads the client's recent submissions and the queue's counts, decides, and queues the
jobs with their submissions counted, or raises and leaves nothing behind. Without the
lock two replicas could each count 199 queued jobs and each add one (measured: 122
admitted of a 120-a-minute rate by six concurrent replicas).

The lock is global, not per client, because the queue's room and the waiting cap are
global. It is held for one short transaction per admission.

A part of `app.store.Store`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from app.store.base import StoreBase, marks, render
from app.store.channel import News, encode
from app.store.dialect import Dialect, Tx
from app.store.jobs import NewJob, insert_in
from app.store.schema import JobRow

RATE_WINDOW_S = 60.0
ADMISSION_LOCK = "boundary:admission"
T = TypeVar("T")


class Admitting:
    """One admission's transaction: what it decides on, and the insert that follows."""

    def __init__(self, tx: Tx, dialect: Dialect, client: str, origin: str) -> None:
        self._tx = tx
        self._dialect = dialect
        self.client = client
        self._origin = origin
        # One read: the queue's counts (tagged 0) and the client's submissions within the
        # rate window (tagged 1), both as of the lock.
        rows = tx.execute(
            render(
                dialect,
                "SELECT 0, {NOW}, count(*), coalesce(sum(CASE WHEN client = ? THEN 1 ELSE 0 "
                "END), 0) FROM jobs WHERE status = 'queued' UNION ALL SELECT 1, at, n, 0 "
                "FROM rate_hits WHERE client = ? AND at > {NOW} - ?",
            ),
            (client, client, RATE_WINDOW_S),
        )
        ((_, at, queued, mine),) = [r for r in rows if r[0] == 0]
        self.at = float(at)
        """Now, on the database's clock."""
        self._queued = (int(queued), int(mine))
        self._hits = sorted((float(r[1]), int(r[2])) for r in rows if r[0] == 1)

    def hits(self) -> list[tuple[float, int]]:
        """The client's submissions within the rate window: (when, how many), oldest first.
        (Older ones are deleted by retention.)"""
        return self._hits

    def queued(self) -> tuple[int, int]:
        """Queued jobs in all, and those of this client (as the admission began)."""
        return self._queued

    def queued_requirements(self) -> list[tuple[str, int]]:
        """Each distinct requirements JSON among queued jobs, with how many have it."""
        rows = self._tx.execute(
            "SELECT requirements, count(*) FROM jobs WHERE status = 'queued' GROUP BY requirements"
        )
        return [(r[0], int(r[1])) for r in rows]

    def count(self, n: int) -> None:
        """Count `n` submissions of this client now."""
        self._tx.later(
            "INSERT INTO rate_hits (client, at, n) VALUES (?, ?, ?)", (self.client, self.at, n)
        )

    def insert(self, jobs: Sequence[NewJob], files: Sequence[str] = ()) -> list[JobRow]:
        """Queue `jobs` for this client; the files they name were used now. Once the
        admission commits, lease requests on every other replica wake up."""
        rows = [insert_in(self._tx, self._dialect, job, self.client) for job in jobs]
        self._tx.notify(encode(self._origin, News("wake", None, {})))
        if files:
            self._tx.execute(
                render(
                    self._dialect,
                    f"UPDATE files SET used_at = {{NOW}} WHERE sha256 IN ({marks(len(files))})",
                ),
                tuple(files),
            )
        return rows

    def within(self, step: Callable[[Tx, Dialect], T]) -> T:
        """Run `step` in this admission's transaction: what a submission stores beside
        its jobs (a fit search and its probes) is kept exactly when they are queued."""
        return step(self._tx, self._dialect)


class Limits(StoreBase):
    """admitting(client) on the store."""

    @contextmanager
    def admitting(self, client: str) -> Iterator[Admitting]:
        """One admission for `client`, whole or not at all (see the module's docstring)."""
        with self._tx() as tx:
            tx.lock(ADMISSION_LOCK)
            yield Admitting(tx, self.dialect, client, self.origin)
