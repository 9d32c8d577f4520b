"""The reaper: re-queues jobs whose lease expired, fails jobs that ran past the server's
limit and expires jobs that waited in the queue too long. The app's lifespan starts it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from app.dispatch.core import DispatcherCore
from app.store import Pruned, now
from app.store.profiles import PROFILE_MEDIA
from workers.protocol import JobStatus

log = logging.getLogger("boundary.dispatch")

DAY_S = 86400.0
START_ALLOWANCE_S = 300.0
"""Beyond JOB_TIMEOUT_S, how long a running job may hold a lease before the server gives
up on it (the worker's own limit excludes starting a runner, which may import JAX)."""


class ReaperMixin(DispatcherCore):
    """reap() and the task that calls it every REAP_INTERVAL_S."""

    def prune(self) -> Pruned:
        """Apply the retention settings now (app.store.retention)."""
        s = self.settings
        at = now()
        self._next_prune = time.monotonic() + s.PRUNE_INTERVAL_S
        pruned = self.store.prune(
            keep_jobs=s.RETAIN_RUNS,
            finished_before=at - s.RETAIN_DAYS * DAY_S,
            unused_before=at - s.FILES_RETAIN_DAYS * DAY_S,
            files_max_bytes=s.FILES_MAX_BYTES,
            attached_media=PROFILE_MEDIA,
        )
        if pruned.jobs or pruned.files:
            log.info(
                "retention: pruned %d finished jobs and %d files (%d bytes)",
                pruned.jobs,
                pruned.files,
                pruned.file_bytes,
            )
        return pruned

    def reap(self) -> int:
        """Re-queue jobs whose lease expired, fail jobs held past the server's limit and
        expire jobs queued too long; how many moved. Leases expire on the monotonic clock."""
        settings = self.settings
        at = now()
        clock = time.monotonic()
        moved = 0
        overdue_s = settings.JOB_TIMEOUT_S + START_ALLOWANCE_S
        if clock >= self._next_prune:
            self.prune()
        for job_id, held in list(self._deadlines.items()):
            if held.deadline >= clock and clock - held.since <= overdue_s:
                continue
            job = self.store.get_job(job_id)
            if job is None or job.status != JobStatus.RUNNING or job.lease_id != held.lease_id:
                self._deadlines.pop(job_id, None)  # it ended through another door
                continue
            self._deadlines.pop(job_id, None)
            worker = job.lease_owner or "?"
            self._worker_done(worker, job.id)
            if held.deadline >= clock:
                # A backstop for a worker that heartbeats but never reports.
                reason = (
                    f"ran past the server's limit ({settings.JOB_TIMEOUT_S:g} s plus "
                    f"{START_ALLOWANCE_S:g} s to start a runner) on worker {worker}"
                )
                done = self.store.end_job(
                    job.id, JobStatus.FAILED, reason, at, from_statuses=(JobStatus.RUNNING,)
                )
            elif job.attempts >= settings.MAX_ATTEMPTS:
                reason = (
                    f"the lease expired {job.attempts} times (last on worker {worker}); "
                    f"gave up after {settings.MAX_ATTEMPTS} attempts"
                )
                done = self.store.end_job(
                    job.id, JobStatus.FAILED, reason, at, from_statuses=(JobStatus.RUNNING,)
                )
            else:
                done = self.store.requeue(
                    job.id, at, f"lease expired on worker {worker}", lease_id=held.lease_id
                )
                self._notify()
            if done:
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
            self.store.grant_grace(now() + self.settings.LEASE_S)  # the deadline shown
            self.hold_running_leases()
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def stop(self) -> None:
        task, self._reaper = self._reaper, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._notify()  # let waiting lease requests see the world once more and return
