"""The dispatcher's shared state: its store, settings and progress hub, the workers it
knows, and the wake-up event lease requests wait on. The dispatcher's other parts (leasing,
reports, the reaper) build on this class.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from app.dispatch.progress import ProgressHub
from app.dispatch.requirements import describe_need, unmet
from app.settings import Settings
from app.store import JobRow, Store, WorkerRow, now
from workers.protocol import FINAL_STATUSES, Capabilities, JobStatus

FORGET_WORKERS_S = 24 * 3600.0  # workers silent this long are not even remembered


class UnknownWorker(LookupError):
    """A worker id this server has no record of: the worker should register again."""


class LeaseEnded(PermissionError):
    """A report on a lease that is not the job's current one (it expired, was re-queued
    or given back, or the job ended): it changes nothing, and `verdict` says why."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


@dataclass
class WorkerEntry:
    """A registered worker as the dispatcher sees it."""

    id: str
    name: str | None
    capabilities: Capabilities
    registered_at: float
    last_seen: float
    current_job: str | None = None
    polling: int = 0
    key: str | None = None
    """The secret its registration returned: re-registering with it keeps the id."""


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
class HeldLease:
    """A running lease as the reaper sees it, on the monotonic clock."""

    lease_id: str
    deadline: float
    since: float


@dataclass(frozen=True)
class Verdict:
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
        self.hub = hub or ProgressHub()
        self._changed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        self._workers: dict[str, WorkerEntry] = {}
        for row in store.list_workers(seen_since=now() - FORGET_WORKERS_S):
            self._remember(row)
        # Lease expiry is decided on the monotonic clock, so a step of the wall clock
        # cannot expire every lease at once. Leases found running when the server starts
        # get one full lease period (downtime is not the workers' fault).
        self._deadlines: dict[str, HeldLease] = {}
        self.hold_running_leases()
        self.leasing = True  # False once the server is shutting down
        self._next_prune = 0.0  # on the monotonic clock: retention runs at the first reap

    def hold_running_leases(self) -> None:
        """Give every running job's lease a full lease period from now (at start-up)."""
        for job_id, lease_id in self.store.running_leases():
            self._deadlines.pop(job_id, None)
            self._hold(job_id, lease_id)

    def _hold(self, job_id: str, lease_id: str) -> None:
        """Give lease `lease_id` on `job_id` a full lease period from now."""
        at = time.monotonic()
        held = self._deadlines.get(job_id)
        since = held.since if held is not None and held.lease_id == lease_id else at
        self._deadlines[job_id] = HeldLease(lease_id, at + self.settings.LEASE_S, since)

    def _lease_of(self, worker_id: str, job_id: str, lease_id: str | None) -> JobRow:
        """The job, while `lease_id` is its current lease and `worker_id` holds it.

        UnknownWorker for a worker never registered, LookupError for an unknown job and
        LeaseEnded for any other lease (expired, re-queued, given back, finished).
        """
        self.worker(worker_id)
        job = self.store.get_job(job_id)
        if job is None:
            raise LookupError(job_id)
        if (
            job.status == JobStatus.RUNNING
            and lease_id
            and job.lease_id == lease_id
            and job.lease_owner == worker_id
        ):
            return job
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
        raise LeaseEnded(Verdict(False, job.status, True, reason))

    def _remember(self, row: WorkerRow) -> None:
        try:
            caps = Capabilities.model_validate(row.capabilities)
        except ValueError:
            return
        self._workers[row.id] = WorkerEntry(
            row.id, row.name, caps, row.registered_at, row.last_heartbeat, row.current_job
        )

    def waiting_reason(self, job: JobRow) -> str | None:
        """Why a queued job is not running: None when a capable worker is connected."""
        if job.status != JobStatus.QUEUED:
            return job.reason
        connected = self.connected_workers()
        if any(unmet(job.requirements, w.capabilities) is None for w in connected):
            return None
        text = f"no worker for {describe_need(job.requirements)} is connected"
        if connected:
            why = sorted({unmet(job.requirements, w.capabilities) or "" for w in connected})
            text += f" (connected workers: {'; '.join(why)})"
        return text

    def worker_or_none(self, worker_id: str) -> WorkerEntry | None:
        return self._workers.get(worker_id)

    def worker(self, worker_id: str) -> WorkerEntry:
        entry = self._workers.get(worker_id)
        if entry is None:
            raise UnknownWorker(worker_id)
        return entry

    def worker_name(self, worker_id: str | None) -> str | None:
        """The name a worker registered with, as /workers shows it, also once it has gone
        (from the store); None for no worker or no name."""
        if worker_id is None:
            return None
        entry = self._workers.get(worker_id)
        return entry.name if entry is not None else self.store.worker_name(worker_id)

    def connected_workers(self) -> list[WorkerEntry]:
        cutoff = now() - self.settings.WORKER_STALE_S
        return [w for w in self._workers.values() if w.polling or w.last_seen >= cutoff]

    def _seen(self, entry: WorkerEntry) -> None:
        entry.last_seen = now()
        self.store.touch_worker(entry.id, entry.last_seen)

    def _worker_done(self, worker_id: str, job_id: str) -> None:
        entry = self._workers.get(worker_id)
        if entry is not None and entry.current_job == job_id:
            entry.current_job = None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _announce(self, job_id: str) -> None:
        job = self.store.get_job(job_id)
        if job is not None:
            self.hub.publish_status(job.id, job.status, job.reason, job.attempts)
