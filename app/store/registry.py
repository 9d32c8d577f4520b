"""The worker registry in the job store: every worker, whichever replica it talks to.

A worker behind a load balancer registers through one replica and heartbeats or asks
for a lease through another; each replica finds it here. A worker is connected while it
was heard from within the stale period or waits in a lease request now
(`polling_until`); both on the database's clock. Its registration key is kept as a
SHA-256, never as itself.

A part of `app.store.Store`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from app.store.base import StoreBase
from app.store.schema import WorkerRow

_COLUMNS = (
    "id, name, capabilities, registered_at, last_heartbeat, current_job, "
    "coalesce(polling_until >= {NOW}, false), {NOW} - last_heartbeat"
)


class WorkersFull(Exception):
    """A new worker would pass the cap of connected workers."""

    def __init__(self, cap: int, stale_s: float) -> None:
        super().__init__(cap)
        self.cap = cap
        self.stale_s = stale_s


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _worker(row: tuple[Any, ...]) -> WorkerRow:
    id_, name, caps, registered, heard, job, polling, age = row
    return WorkerRow(
        id_,
        name,
        json.loads(caps),
        float(registered),
        float(heard),
        job,
        bool(polling),
        max(0.0, float(age)),
    )


class Registry(StoreBase):
    """register_worker, touch_worker and the queries on workers."""

    def register_worker(
        self,
        new_id: str,
        key: str,
        name: str | None,
        capabilities: dict[str, Any],
        *,
        claimed_id: str | None = None,
        claimed_key: str | None = None,
        cap: tuple[int, float] | None = None,
    ) -> tuple[str, str]:
        """Record a worker: under `claimed_id` when `claimed_key` is that worker's key
        (it registers again, say with new capabilities), else as `new_id` with `key`.
        The id and key it holds now. With `cap` (most, stale_s), WorkersFull instead of
        a new worker when `most` workers are connected (heard from within `stale_s`
        seconds, or waiting in a lease request)."""
        caps = json.dumps(capabilities)
        with self._tx() as tx:
            if claimed_id and claimed_key:
                kept = tx.execute(
                    self._sql(
                        "UPDATE workers SET name = ?, capabilities = ?, last_heartbeat = {NOW} "
                        "WHERE id = ? AND key_hash = ? RETURNING id"
                    ),
                    (name, caps, claimed_id, key_hash(claimed_key)),
                )
                if kept:
                    return claimed_id, claimed_key
            if cap is not None:
                (connected,) = tx.execute(
                    self._sql(
                        "SELECT count(*) FROM workers WHERE last_heartbeat >= {NOW} - ? "
                        "OR polling_until >= {NOW}"
                    ),
                    (cap[1],),
                )[0]
                if int(connected) >= cap[0]:
                    raise WorkersFull(*cap)
            tx.execute(
                self._sql(
                    "INSERT INTO workers (id, name, capabilities, registered_at, last_heartbeat, "
                    "key_hash) VALUES (?, ?, ?, {NOW}, {NOW}, ?)"
                ),
                (new_id, name, caps, key_hash(key)),
            )
        return new_id, key

    def worker_key_hash(self, worker_id: str) -> str | None:
        """The SHA-256 of the key `worker_id` registered with; None for an unknown worker
        (or one stored before workers had keys)."""
        rows = self._read("SELECT key_hash FROM workers WHERE id = ?", (worker_id,))
        return str(rows[0][0]) if rows and rows[0][0] else None

    def touch_worker(self, worker_id: str, polling_s: float = 0.0) -> WorkerRow | None:
        """The worker was heard from now, and will wait in a lease request for
        `polling_s` seconds (0: it does not); the worker, or None if never registered."""
        rows = self._read(
            "UPDATE workers SET last_heartbeat = {NOW}, polling_until = {NOW} + ? "
            f"WHERE id = ? RETURNING {_COLUMNS}",
            (polling_s, worker_id),
        )
        return _worker(rows[0]) if rows else None

    def get_worker(self, worker_id: str) -> WorkerRow | None:
        rows = self._read(f"SELECT {_COLUMNS} FROM workers WHERE id = ?", (worker_id,))
        return _worker(rows[0]) if rows else None

    def worker_name(self, worker_id: str) -> str | None:
        """The name a worker registered with (None when it gave none or is unknown)."""
        rows = self._read("SELECT name FROM workers WHERE id = ?", (worker_id,))
        return str(rows[0][0]) if rows and rows[0][0] else None

    def list_workers(self, stale_s: float | None = None) -> list[WorkerRow]:
        """Every worker, or with `stale_s` those connected: heard from within `stale_s`
        seconds, or waiting in a lease request now. Oldest registration first."""
        where = ""
        args: tuple[float, ...] = ()
        if stale_s is not None:
            where = "WHERE last_heartbeat >= {NOW} - ? OR polling_until >= {NOW}"
            args = (stale_s,)
        rows = self._read(
            f"SELECT {_COLUMNS} FROM workers {where} ORDER BY registered_at, id", args
        )
        return [_worker(r) for r in rows]

    def forget_workers(self, silent_s: float) -> int:
        """Delete workers not heard from for `silent_s` seconds; how many."""
        rows = self._read(
            "DELETE FROM workers WHERE last_heartbeat < {NOW} - ? RETURNING id", (silent_s,)
        )
        return len(rows)
