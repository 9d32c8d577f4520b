"""The dispatcher: queues jobs, leases them to capable workers, and reaps what expires.

Every decision reads and writes the store without an `await` in between, so with one
event loop two lease requests can never take the same job. A lease request waits on an
asyncio event that is set whenever a job enters the queue (submitted, re-queued or
given back), never on a fixed polling sleep. A background reaper, started by the app's
lifespan, re-queues jobs whose lease deadline passed and expires jobs that waited in the
queue too long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from app.progress import ProgressHub
from app.requirements import Requirements, describe_need, job_requirements, unmet
from app.runs.profile import keep_profile
from app.settings import Settings
from app.store import JobRow, NewRun, Store, WorkerRow, now
from app.submission import RateLimiter
from workers.protocol import (
    ARTIFACT_NAMES,
    FINAL_STATUSES,
    Capabilities,
    JobSpec,
    JobStatus,
    ProgressEvent,
    RunResult,
)

log = logging.getLogger("boundary.dispatch")

WORKER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
FORGET_WORKERS_S = 24 * 3600.0  # workers silent this long are not even remembered
START_ALLOWANCE_S = 300.0
"""Beyond JOB_TIMEOUT_S, how long a running job may hold a lease before the server gives
up on it (the worker's own limit excludes starting a runner, which may import JAX)."""


class UnknownWorker(LookupError):
    """A worker id this server has no record of: the worker should register again."""


class NotYours(PermissionError):
    """A worker reported on a job it does not hold."""


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


@dataclass(frozen=True)
class LeaseGrant:
    """A job leased to a worker."""

    job_id: str
    attempt: int
    spec: dict[str, Any]
    requirements: dict[str, Any]
    lease_deadline: float
    timeout_s: float


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


class Dispatcher:
    """Jobs in, leases out. One per app; lives in `AppState.dispatcher`."""

    def __init__(self, store: Store, settings: Settings, hub: ProgressHub | None = None) -> None:
        self.store = store
        self.settings = settings
        self.hub = hub or ProgressHub()
        self.rate = RateLimiter(settings.SUBMIT_RATE)
        self._changed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        self._workers: dict[str, WorkerEntry] = {}
        for row in store.list_workers(seen_since=now() - FORGET_WORKERS_S):
            self._remember(row)

    def _remember(self, row: WorkerRow) -> None:
        try:
            caps = Capabilities.model_validate(row.capabilities)
        except ValueError:
            return
        self._workers[row.id] = WorkerEntry(
            row.id, row.name, caps, row.registered_at, row.last_heartbeat, row.current_job
        )

    # --- jobs ----------------------------------------------------------------------------

    def submit(self, spec: JobSpec, devices: int, client: str | None) -> JobRow:
        """Queue a validated job and wake the workers waiting for one."""
        job_id = secrets.token_hex(8)
        spec_json = spec.model_dump(mode="json")
        job = self.store.insert_job(
            job_id, spec_json, dict(job_requirements(spec, devices)), client, now()
        )
        self._notify()
        return job

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job; False if it had already ended."""
        job = self.store.get_job(job_id)
        ended = self.store.end_job(job_id, JobStatus.CANCELLED, "cancelled on request", now())
        if ended:
            if job is not None and job.lease_owner is not None:
                self._worker_done(job.lease_owner, job_id)
            self._announce(job_id)
        return ended

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

    # --- workers -------------------------------------------------------------------------

    def register(self, caps: Capabilities, name: str | None, worker_id: str | None) -> str:
        """Record a worker; reuses `worker_id` when the worker had one, else makes one."""
        if worker_id is None or not WORKER_ID.match(worker_id):
            worker_id = f"w-{secrets.token_hex(6)}"
        at = now()
        self.store.upsert_worker(worker_id, name, caps.model_dump(mode="json"), at)
        entry = self._workers.get(worker_id)
        if entry is None:
            self._workers[worker_id] = WorkerEntry(worker_id, name, caps, at, at)
        else:
            entry.capabilities, entry.name, entry.last_seen = caps, name, at
        self._notify()  # a new worker may make a waiting job runnable
        return worker_id

    def worker_or_none(self, worker_id: str) -> WorkerEntry | None:
        return self._workers.get(worker_id)

    def worker(self, worker_id: str) -> WorkerEntry:
        entry = self._workers.get(worker_id)
        if entry is None:
            raise UnknownWorker(worker_id)
        return entry

    def connected_workers(self) -> list[WorkerEntry]:
        cutoff = now() - self.settings.WORKER_STALE_S
        return [w for w in self._workers.values() if w.polling or w.last_seen >= cutoff]

    def _seen(self, entry: WorkerEntry) -> None:
        entry.last_seen = now()
        self.store.touch_worker(entry.id, entry.last_seen)

    async def lease(self, worker_id: str, wait_s: float) -> LeaseGrant | None:
        """A job for this worker, waiting up to `wait_s` for one; None when none came."""
        entry = self.worker(worker_id)
        self._seen(entry)
        give_up = time.monotonic() + wait_s
        entry.polling += 1
        try:
            while True:
                grant = self._try_claim(entry)
                if grant is not None:
                    return grant
                remaining = give_up - time.monotonic()
                if remaining <= 0:
                    return None
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        finally:
            entry.polling -= 1
            entry.last_seen = now()

    def _try_claim(self, entry: WorkerEntry) -> LeaseGrant | None:
        paths = [p.value for p in entry.capabilities.paths]  # a job's path is always offered
        for job in self.store.jobs_with_status(JobStatus.QUEUED, self.settings.MAX_QUEUE, paths):
            if unmet(job.requirements, entry.capabilities) is not None:
                continue
            at = now()
            deadline = at + self.settings.LEASE_S
            attempt = self.store.claim(job.id, entry.id, deadline, at)
            if attempt is None:
                continue
            entry.current_job = job.id
            self.hub.publish_status(job.id, JobStatus.RUNNING, None, attempt)
            return LeaseGrant(
                job.id, attempt, job.spec, job.requirements, deadline, self.settings.JOB_TIMEOUT_S
            )
        return None

    def heartbeat(self, worker_id: str, job_id: str | None) -> Verdict:
        """Keep a worker (and the lease on `job_id`) alive; says whether to abandon the job."""
        entry = self.worker(worker_id)
        self._seen(entry)
        if job_id is None:
            return Verdict(True, JobStatus.QUEUED)
        at = now()
        if self.store.extend_lease(job_id, worker_id, at + self.settings.LEASE_S, at):
            return Verdict(True, JobStatus.RUNNING)
        job = self.store.get_job(job_id)
        if job is None:
            return Verdict(False, JobStatus.CANCELLED, True, "the server has no such job")
        if job.status == JobStatus.CANCELLED:
            return Verdict(False, job.status, True, "the job was cancelled")
        if job.status in FINAL_STATUSES:
            return Verdict(False, job.status, True, f"the job has already ended ({job.status})")
        return Verdict(False, job.status, True, "the lease was lost; the job went to another")

    def progress(self, worker_id: str, job_id: str, events: list[ProgressEvent]) -> Verdict:
        """Pass on progress of a job the worker holds; never stored."""
        job = self.store.get_job(job_id)
        if job is None or job.lease_owner != worker_id or job.status != JobStatus.RUNNING:
            status = job.status if job else JobStatus.CANCELLED
            return Verdict(False, status, True, "the worker does not hold this job")
        for event in events:
            self.hub.publish_progress(job_id, event)
        return Verdict(True, job.status)

    def _job_for_report(self, worker_id: str, job_id: str) -> JobRow:
        self.worker(worker_id)
        job = self.store.get_job(job_id)
        if job is None:
            raise LookupError(job_id)
        if job.status not in FINAL_STATUSES and worker_id not in (job.lease_owner, job.worker_id):
            raise NotYours(f"worker {worker_id} does not hold job {job_id}")
        return job

    def complete(
        self, worker_id: str, job_id: str, attempt: int, result: RunResult, run_s: float | None
    ) -> Verdict:
        """Store the run of a job and mark it done; harmless when posted twice."""
        job = self._job_for_report(worker_id, job_id)
        if job.status in FINAL_STATUSES:
            return Verdict(False, job.status)
        settings = self.settings
        artifacts: dict[str, tuple[str, bool]] = {}
        inline: dict[str, str | None] = {}
        truncated: list[str] = []
        for name in ARTIFACT_NAMES:
            text = getattr(result.artifacts, name)
            if text is None:
                inline[name] = None
                continue
            artifacts[name] = cap_text(text, settings.ARTIFACT_MAX_BYTES)
            inline[name], cut = cap_text(text, settings.INLINE_ARTIFACT_BYTES)
            if cut:
                truncated.append(name)
        capped = result.model_copy(update={"artifacts": result.artifacts.model_copy(update=inline)})
        capped = keep_profile(self.store, job_id, capped, settings.PROFILE_MAX_BYTES)
        entry = self._workers.get(worker_id)
        roofs = entry.capabilities.ceilings if entry is not None else None
        if entry is not None and roofs is not None:  # the roofs of the run's roofline
            named = roofs.model_copy(update={"worker": entry.name or entry.id})
            capped = capped.model_copy(update={"ceilings": named})
        run = NewRun(
            result_json=capped.model_dump_json(),
            truncated=truncated,
            valid=result.valid,
            stage_seconds=result.stage_seconds.model_dump(),
            run_s=run_s,
            artifacts=artifacts,
        )
        if not self.store.finish_job(job_id, attempt, worker_id, run, now()):
            current = self.store.get_job(job_id)
            return Verdict(False, current.status if current else JobStatus.CANCELLED)
        self._worker_done(worker_id, job_id)
        self._announce(job_id)
        return Verdict(True, JobStatus.DONE)

    def fail(self, worker_id: str, job_id: str, reason: str, stderr_tail: str | None) -> Verdict:
        """Record that the worker could not run the job; harmless when posted twice."""
        job = self._job_for_report(worker_id, job_id)
        if job.status in FINAL_STATUSES:
            return Verdict(False, job.status)
        ended = self.store.end_job(
            job_id, JobStatus.FAILED, reason[:2000], now(), stderr_tail=stderr_tail
        )
        self._worker_done(worker_id, job_id)
        if ended:
            self._announce(job_id)
        current = self.store.get_job(job_id)
        return Verdict(ended, current.status if current else JobStatus.FAILED)

    def release(self, worker_id: str, job_id: str) -> Verdict:
        """A worker gives a lease back (it is shutting down): the job is queued again."""
        self.worker(worker_id)
        job = self.store.get_job(job_id)
        if job is None or job.lease_owner != worker_id:
            return Verdict(False, job.status if job else JobStatus.CANCELLED)
        self.store.requeue(job_id, now(), f"given back by worker {worker_id}", count_attempt=False)
        self._worker_done(worker_id, job_id)
        self._announce(job_id)
        self._notify()
        return Verdict(True, JobStatus.QUEUED)

    def _worker_done(self, worker_id: str, job_id: str) -> None:
        entry = self._workers.get(worker_id)
        if entry is not None and entry.current_job == job_id:
            entry.current_job = None

    # --- expiry --------------------------------------------------------------------------

    def reap(self) -> int:
        """Re-queue jobs whose lease expired and expire jobs queued too long; how many moved."""
        settings = self.settings
        at = now()
        moved = 0
        for job in self.store.expired_leases(at):
            worker = job.lease_owner or "?"
            self._worker_done(worker, job.id)
            if job.attempts >= settings.MAX_ATTEMPTS:
                reason = (
                    f"the lease expired {job.attempts} times (last on worker {worker}); "
                    f"gave up after {settings.MAX_ATTEMPTS} attempts"
                )
                done = self.store.end_job(
                    job.id, JobStatus.FAILED, reason, at, from_statuses=(JobStatus.RUNNING,)
                )
            else:
                done = self.store.requeue(job.id, at, f"lease expired on worker {worker}")
                self._notify()
            if done:
                moved += 1
                self._announce(job.id)
        # A backstop for a worker that heartbeats but never reports (its own limit failed).
        overdue = at - settings.JOB_TIMEOUT_S - START_ALLOWANCE_S
        for job in self.store.overdue_running(overdue):
            reason = (
                f"ran past the server's limit ({settings.JOB_TIMEOUT_S:g} s plus "
                f"{START_ALLOWANCE_S:g} s to start a runner) on worker {job.lease_owner}"
            )
            if self.store.end_job(
                job.id, JobStatus.FAILED, reason, at, from_statuses=(JobStatus.RUNNING,)
            ):
                self._worker_done(job.lease_owner or "?", job.id)
                moved += 1
                self._announce(job.id)
        for job in self.store.expired_queued(at - settings.QUEUE_TIMEOUT_S):
            waiting = self.waiting_reason(job)
            limit = f"{settings.QUEUE_TIMEOUT_S:g} s"
            if waiting is not None:
                reason = f"expired after {limit} in the queue: {waiting}"
            else:
                reason = f"expired after {limit} in the queue: every capable worker was busy"
            if self.store.end_job(
                job.id, JobStatus.EXPIRED, reason, at, from_statuses=(JobStatus.QUEUED,)
            ):
                moved += 1
                self._announce(job.id)
        return moved

    async def _reap_forever(self) -> None:
        while True:
            try:
                self.reap()
            except Exception:
                log.exception("reaping failed; trying again")
            await asyncio.sleep(self.settings.REAP_INTERVAL_S)

    def start(self) -> None:
        """Start the reaper; a restarted server first gives running leases a fresh deadline."""
        if self._reaper is None:
            self.store.grant_grace(now() + self.settings.LEASE_S)
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def stop(self) -> None:
        task, self._reaper = self._reaper, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._notify()  # let waiting lease requests see the world once more and return

    # --- helpers -------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _announce(self, job_id: str) -> None:
        job = self.store.get_job(job_id)
        if job is not None:
            self.hub.publish_status(job.id, job.status, job.reason, job.attempts)


__all__ = [
    "Dispatcher",
    "LeaseGrant",
    "NotYours",
    "RateLimiter",
    "Requirements",
    "UnknownWorker",
    "Verdict",
    "cap_text",
]
