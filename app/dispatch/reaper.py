"""The reaper: re-queues jobs whose lease expired, fails jobs that ran past the server's
limit and expires jobs that waited in the queue too long (never a live fit search's
probe); and now and then, retention. After each reap, its watchers' turn.
The app's lifespan starts it. Every replica runs one: each expired lease moves once
whichever reaps it (app.store.reaping), and retention runs on one replica at a time.

Lease deadlines are on the database's clock, so replicas' clocks never meet. A step of
that clock, or an outage of every replica, gives running leases one more full period
instead of expiring them (the outage rule in app.store.reaping).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from app.dispatch.core import DispatcherCore
from app.store import Expired, Pruned
from app.store.profiles import PROFILE_MEDIA
from workers.protocol import JobStatus

log = logging.getLogger("boundary.dispatch")

DAY_S = 86400.0
START_ALLOWANCE_S = 300.0
"""Beyond JOB_TIMEOUT_S, how long a running job may hold a lease before the server gives
up on it (the worker's own limit excludes starting a runner, which may import JAX)."""
OUTAGE_REAPS = 10
"""No reap for this many reap intervals (and at least OUTAGE_MIN_S) is an outage."""
OUTAGE_MIN_S = 5.0


class ReaperMixin(DispatcherCore):
    """reap() and the task that calls it every REAP_INTERVAL_S."""

    def prune(self) -> Pruned | None:
        """Apply the retention settings now (app.store.retention); None when another
        replica is doing it."""
        s = self.settings
        self._next_prune = time.monotonic() + s.PRUNE_INTERVAL_S
        pruned = self.store.prune(
            keep_jobs=s.RETAIN_RUNS,
            finished_age_s=s.RETAIN_DAYS * DAY_S,
            unused_age_s=s.FILES_RETAIN_DAYS * DAY_S,
            files_max_bytes=s.FILES_MAX_BYTES,
            attached_media=PROFILE_MEDIA,
        )
        if pruned is not None and (pruned.jobs or pruned.files):
            log.info(
                "retention: pruned %d finished jobs and %d files (%d bytes)",
                pruned.jobs,
                pruned.files,
                pruned.file_bytes,
            )
        return pruned

    def _verdict(self, found: Expired) -> tuple[JobStatus, str]:
        """What becomes of a running job whose lease expired or that ran too long."""
        settings = self.settings
        job = found.job
        worker = job.lease_owner or "?"
        if found.overdue:  # a backstop for a worker that heartbeats but never reports
            return JobStatus.FAILED, (
                f"ran past the server's limit ({settings.JOB_TIMEOUT_S:g} s plus "
                f"{START_ALLOWANCE_S:g} s to start a runner) on worker {worker}"
            )
        if job.attempts >= settings.MAX_ATTEMPTS:
            return JobStatus.FAILED, (
                f"the lease expired {job.attempts} times (last on worker {worker}); "
                f"gave up after {settings.MAX_ATTEMPTS} attempts"
            )
        return JobStatus.QUEUED, f"lease expired on worker {worker}"

    def reap(self) -> int:
        """Re-queue jobs whose lease expired, fail jobs held past the server's limit and
        expire jobs queued too long; how many moved."""
        settings = self.settings
        if time.monotonic() >= self._next_prune:
            self.prune()
        moved = self.store.reap_leases(
            lease_s=settings.LEASE_S,
            overdue_s=settings.JOB_TIMEOUT_S + START_ALLOWANCE_S,
            outage_s=max(OUTAGE_MIN_S, OUTAGE_REAPS * settings.REAP_INTERVAL_S),
            decide=self._verdict,
        )
        for job in moved:
            self._announce(job)  # a re-queued one wakes lease requests on every replica
        limit = f"{settings.QUEUE_TIMEOUT_S:g} s"
        expired = self.store.expired_queued(settings.QUEUE_TIMEOUT_S)
        probes = self.store.live_probe_jobs([job.id for job in expired])
        for job in expired:
            if job.id in probes:  # a live fit search's probe waits as long as it must
                continue
            waiting = self.waiting_reason(job) or "every capable worker was busy"
            ended = self.store.end_job(
                job.id,
                JobStatus.EXPIRED,
                f"expired after {limit} in the queue: {waiting}",
                from_statuses=(JobStatus.QUEUED,),
            )
            if ended is not None:
                moved.append(ended)
                self._announce(ended)
        self._call_back(self._on_reap)
        return len(moved)

    async def _reap_forever(self) -> None:
        while True:
            try:
                self.reap()
            except Exception:
                log.exception("reaping failed; trying again")
            await asyncio.sleep(self.settings.REAP_INTERVAL_S)

    def start(self) -> None:
        """Start the reaper, and the news from other replicas."""
        if self._reaper is None:
            loop = asyncio.get_running_loop()
            self._reaper = loop.create_task(self._reap_forever())
            self._relay = loop.create_task(self.hub.relay())

    async def stop(self) -> None:
        tasks = [t for t in (self._reaper, self._relay) if t is not None]
        self._reaper = self._relay = None
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._notify()  # let waiting lease requests see the world once more and return
