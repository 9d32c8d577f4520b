"""The dispatcher's shared state: its store, settings and progress hub, the workers it
knows (from the store, whichever replica they registered with), and the wake-up event
lease requests wait on. The dispatcher's other parts (leasing, reports, the reaper)
build on this class.

A replica keeps nothing in memory that another replica needs: jobs, leases and their
deadlines, workers and admission counts are in the store. What it does keep is the live
progress of running jobs (also relayed to every other replica) and its open event
streams.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.dispatch.progress import ProgressHub
from app.dispatch.requirements import describe_need, unmet
from app.settings import Settings
from app.store import JobRow, Store, WorkerRow
from app.store.registry import key_hash
from workers.protocol import FINAL_STATUSES, Capabilities, JobStatus, merge_capacities

KNOWN_KEYS = 10_000
"""Workers whose key this replica has checked, remembered so that each message does not
read it again (a worker's key never changes; past this many the memory starts over)."""
RECENT_S = 0.5
"""How long admission and a job's waiting reason reuse a read of the connected workers."""

log = logging.getLogger("boundary.dispatch")


class UnknownWorker(LookupError):
    """A worker id this server has no record of: the worker should register again."""


class WrongKey(PermissionError):
    """A message names a worker without that worker's key (missing: `missing` is True)."""

    def __init__(self, worker_id: str, missing: bool) -> None:
        super().__init__(worker_id)
        self.worker_id = worker_id
        self.missing = missing


class LeaseEnded(PermissionError):
    """A report on a lease that is not the job's current one (it expired, was re-queued
    or given back, or the job ended): it changes nothing, and `ack` says why."""

    def __init__(self, ack: Ack) -> None:
        super().__init__(ack.reason)
        self.ack = ack


@dataclass(frozen=True)
class WorkerEntry:
    """A registered worker as the dispatcher sees it."""

    id: str
    name: str | None
    capabilities: Capabilities
    registered_at: float
    last_seen: float
    current_job: str | None
    polling: bool
    """It waits in a lease request now, on some replica."""
    age_s: float
    """Seconds since it was last heard from."""

    @classmethod
    def of(cls, row: WorkerRow) -> WorkerEntry | None:
        """The entry for a stored worker; None when its capabilities no longer parse."""
        try:
            caps = Capabilities.model_validate(row.capabilities)
        except ValueError:
            return None
        return cls(
            row.id,
            row.name,
            caps,
            row.registered_at,
            row.last_heartbeat,
            row.current_job,
            row.polling,
            row.age_s,
        )


@dataclass(frozen=True)
class LeaseGrant:
    """A job leased to a worker."""

    job_id: str
    lease_id: str
    attempt: int
    spec: dict[str, Any]
    requirements: dict[str, Any]
    lease_deadline: float
    timeout_s: float


@dataclass(frozen=True)
class Ack:
    """The server's answer to a report from a worker."""

    accepted: bool
    status: JobStatus
    cancel: bool = False
    reason: str | None = None


def cap_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """`text` cut to at most `max_bytes` of UTF-8, and whether it was cut."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text, False
    return data[:max_bytes].decode(errors="ignore"), True


class DispatcherCore:
    """What every part of the dispatcher reads: the store and the workers it knows."""

    def __init__(self, store: Store, settings: Settings, hub: ProgressHub | None = None) -> None:
        self.store = store
        self.settings = settings
        self.hub = hub or ProgressHub(channel=store.channel())
        self.hub.on_wake(self._notify)
        self._changed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        self._relay: asyncio.Task[None] | None = None
        self._recent: tuple[float, list[WorkerEntry]] | None = None
        self.leasing = True  # False once the server is shutting down
        self._next_prune = 0.0  # on the monotonic clock: retention runs at the first reap
        self._keys: dict[str, str] = {}  # worker id -> its key's hash, checked already
        self._on_ended: list[Callable[[str], None]] = []
        self._on_reap: list[Callable[[], None]] = []

    def on_ended(self, callback: Callable[[str], None]) -> None:
        """Call `callback(job_id)` once a job reaches a final status on this replica
        (what a fit search plans its next probe on). A callback's error is logged and
        never reaches the worker's report or the request that ended the job."""
        self._on_ended.append(callback)

    def on_reap(self, callback: Callable[[], None]) -> None:
        """Call `callback()` after each reap: what must be retried now and then (a fit
        search whose next probe admission refused, or whose replica went down)."""
        self._on_reap.append(callback)

    def _call_back(self, callbacks: list[Callable[..., None]], *args: str) -> None:
        for callback in callbacks:
            try:
                callback(*args)
            except Exception:
                log.exception("a job's watcher failed; it is retried at the next reap")

    def check_key(self, worker_id: str, key: str | None) -> None:
        """Nothing when `key` is `worker_id`'s key; WrongKey when it is missing or not
        that worker's, UnknownWorker for a worker never registered (or forgotten)."""
        wanted = self._keys.get(worker_id)
        if wanted is None:
            wanted = self.store.worker_key_hash(worker_id)
            if wanted is None:
                raise UnknownWorker(worker_id)
            if len(self._keys) >= KNOWN_KEYS:
                self._keys.clear()
            self._keys[worker_id] = wanted
        if not key:
            raise WrongKey(worker_id, missing=True)
        if not hmac.compare_digest(key_hash(key), wanted):
            raise WrongKey(worker_id, missing=False)

    def _lease_of(
        self, worker_id: str, job_id: str, lease_id: str | None, read: JobRow | None = None
    ) -> JobRow:
        """The job (as `read` just now, or as the store has it), while `lease_id` is its
        current lease and `worker_id` holds it.

        UnknownWorker for a worker never registered, LookupError for an unknown job and
        LeaseEnded for any other lease (expired, re-queued, given back, finished).
        """
        job = read if read is not None and read.id == job_id else self.store.get_job(job_id)
        if (
            job is not None
            and job.status == JobStatus.RUNNING
            and lease_id
            and job.lease_id == lease_id
            and job.lease_owner == worker_id
        ):
            return job  # (its holder is a registered worker: the store leased it to one)
        self.worker(worker_id)
        if job is None:
            raise LookupError(job_id)
        raise LeaseEnded(self._ended_ack(job))

    def _ended_ack(self, job: JobRow) -> Ack:
        """Why a report's lease is not `job`'s current one."""
        if job.status == JobStatus.CANCELLED:
            reason = "the job was cancelled"
        elif job.status in FINAL_STATUSES:
            reason = f"the job has already ended ({job.status})"
        elif job.status == JobStatus.RUNNING:
            # Another lease holds it: the reporter's lease ended earlier, or was never this
            # job's (a forged or mistaken report). Saying "re-queued" here was false.
            reason = (
                "this lease has ended or was never this job's; the job is running under "
                "another lease"
            )
        else:
            reason = "this lease has ended (it expired or was given back); the job was re-queued"
        return Ack(False, job.status, True, reason)

    def waiting_reason(self, job: JobRow) -> str | None:
        """Why a queued job is not running: None when a capable worker is connected."""
        if job.status != JobStatus.QUEUED:
            return job.reason
        connected = self.recent_workers()
        if any(unmet(job.requirements, w.capabilities) is None for w in connected):
            return None
        text = f"no worker for {describe_need(job.requirements)} is connected"
        if connected:
            why = sorted({unmet(job.requirements, w.capabilities) or "" for w in connected})
            text += f" (connected workers: {'; '.join(why)})"
        return text

    def worker_or_none(self, worker_id: str) -> WorkerEntry | None:
        row = self.store.get_worker(worker_id)
        return WorkerEntry.of(row) if row is not None else None

    def worker(self, worker_id: str) -> WorkerEntry:
        entry = self.worker_or_none(worker_id)
        if entry is None:
            raise UnknownWorker(worker_id)
        return entry

    def worker_name(self, worker_id: str | None) -> str | None:
        """The name a worker registered with, as /workers shows it, also once it has gone;
        None for no worker or no name."""
        return self.store.worker_name(worker_id) if worker_id is not None else None

    def connected_workers(self) -> list[WorkerEntry]:
        """Workers heard from within WORKER_STALE_S, or waiting for a lease now, on any
        replica."""
        rows = self.store.list_workers(stale_s=self.settings.WORKER_STALE_S)
        entries = [e for e in map(WorkerEntry.of, rows) if e is not None]
        self._recent = (time.monotonic(), entries)
        return entries

    def recent_workers(self) -> list[WorkerEntry]:
        """`connected_workers`, read at most RECENT_S ago: what admission and the reasons a
        job waits ask on every request. A worker that registered here is seen at once;
        one that registered with another replica within RECENT_S."""
        if self._recent is not None and time.monotonic() - self._recent[0] < RECENT_S:
            return self._recent[1]
        return self.connected_workers()

    def capacities(self) -> dict[str, int]:
        """TPU target id → the bytes libtpu makes available to a program on it, as the
        connected workers read it from their libtpu (the latest registered first)."""
        workers = sorted(self.recent_workers(), key=lambda w: w.registered_at, reverse=True)
        return merge_capacities(w.capabilities.capacities for w in workers)

    def recent_worker(self, worker_id: str) -> WorkerEntry | None:
        """A worker as `recent_workers` saw it, or as the store has it now."""
        entry = next((w for w in self.recent_workers() if w.id == worker_id), None)
        return entry or self.worker_or_none(worker_id)

    def _notify(self) -> None:
        """Wake this replica's lease requests: the queue or the workers changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _announce(self, job: JobRow) -> None:
        """Tell subscribers, here and on every replica, that `job`'s status changed (and
        this replica's watchers, when it ended)."""
        self.hub.publish_status(job.id, job.status, job.reason, job.attempts)
        if job.status in FINAL_STATUSES:
            self._call_back(self._on_ended, job.id)
