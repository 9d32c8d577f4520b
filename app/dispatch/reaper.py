"""The reaper: re-queues jobs whose lease expired, fails jobs that ran past the server's
limit and expires jobs that waited in the queue too long. The app's lifespan starts it."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.dispatch.core import DispatcherCore
from app.store import now
from workers.protocol import JobStatus

log = logging.getLogger("boundary.dispatch")

START_ALLOWANCE_S = 300.0
"""Beyond JOB_TIMEOUT_S, how long a running job may hold a lease before the server gives
up on it (the worker's own limit excludes starting a runner, which may import JAX)."""


class ReaperMixin(DispatcherCore):
    """reap() and the task that calls it every REAP_INTERVAL_S."""

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
