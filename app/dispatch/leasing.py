"""Queueing jobs and leasing them to capable workers.

A lease is one conditional statement in the store (app.store.jobs): the next queued job
this worker can run, clients taking turns (the one with the fewest jobs running, then the
one served longest ago; its oldest job), taken with `FOR UPDATE SKIP LOCKED` on
PostgreSQL, so that two lease requests never take the same job, on one replica or on
several. A lease request waits on
an asyncio event that is set whenever a job enters the queue, here or on another replica
(the channel's wake-ups), never on a fixed polling sleep; it looks at the queue again
every RECHECK_S all the same, so a wake-up lost with the channel costs seconds, not a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Sequence

from app.dispatch.core import DispatcherCore, LeaseGrant, UnknownWorker, WorkerEntry
from app.dispatch.requirements import job_requirements, unmet
from app.store import Admitting, JobRow, NewJob
from workers.catalog import WORKLOADS
from workers.protocol import Capabilities, JobSpec, JobStatus

RECHECK_S = 5.0


class LeasingMixin(DispatcherCore):
    """Jobs in (submit, cancel), workers registered, leases out."""

    # --- jobs ----------------------------------------------------------------------------

    def submit(self, admitting: Admitting, jobs: Sequence[tuple[JobSpec, int]]) -> list[JobRow]:
        """Queue validated jobs (spec, devices it spans) inside an admission's
        transaction; the files they name count as used now. Other replicas' lease
        requests wake when it commits; `queued` wakes this one's."""
        new: list[NewJob] = []
        files: list[str] = []
        for spec, devices in jobs:
            spec_json = spec.model_dump(mode="json")
            new.append(
                NewJob(secrets.token_hex(8), spec_json, dict(job_requirements(spec, devices)))
            )
            fields = getattr(WORKLOADS.get(spec.workload), "file_fields", {})
            named = [spec.params.get(name) for name in fields]
            files += [sha for sha in named if isinstance(sha, str) and sha not in files]
        return admitting.insert(new, files)

    def queued(self) -> None:
        """Jobs were queued (the admission committed): wake the lease requests here."""
        self._notify()

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job; False if it had already ended."""
        job = self.store.end_job(job_id, JobStatus.CANCELLED, "cancelled on request")
        if job is not None:
            self._announce(job)
        return job is not None

    # --- workers -------------------------------------------------------------------------

    def register(
        self,
        caps: Capabilities,
        name: str | None,
        worker_id: str | None = None,
        key: str | None = None,
    ) -> tuple[str, str]:
        """Record a worker; its id and key. The server makes the id: a worker never
        chooses one, so it cannot take another's. A worker registering again (new
        capabilities) keeps its id by presenting the key its first registration got,
        through whichever replica. WorkersFull (app.store) when a new worker would pass
        MAX_WORKERS connected ones."""
        registered = self.store.register_worker(
            f"w-{secrets.token_hex(8)}",
            secrets.token_urlsafe(24),
            name,
            caps.model_dump(mode="json"),
            claimed_id=worker_id,
            claimed_key=key,
            cap=(self.settings.MAX_WORKERS, self.settings.WORKER_STALE_S),
        )
        self._recent = None  # read the connected workers again: this one is new
        self._notify()  # a new worker may make a waiting job runnable
        return registered

    async def lease(self, worker_id: str, wait_s: float) -> LeaseGrant | None:
        """A job for this worker, waiting up to `wait_s` for one; None when none came."""
        row = self.store.touch_worker(worker_id, polling_s=wait_s)
        entry = WorkerEntry.of(row) if row is not None else None
        if entry is None:
            raise UnknownWorker(worker_id)
        give_up = time.monotonic() + wait_s
        granted = False
        try:
            while True:
                grant = self._try_claim(entry)
                if grant is not None:
                    granted = True  # the lease itself marked the worker as no longer waiting
                    return grant
                remaining = give_up - time.monotonic()
                if remaining <= 0:
                    return None
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(remaining, RECHECK_S))
        finally:
            if not granted:
                self.store.touch_worker(worker_id)

    def stop_leasing(self) -> None:
        """Grant no more leases (the server is shutting down); waiting requests return."""
        self.leasing = False
        self._notify()

    def _try_claim(self, entry: WorkerEntry) -> LeaseGrant | None:
        if not self.leasing:
            return None
        # Group the queue by what its jobs need, keep the needs this worker meets, and take
        # the next job among them: a runnable job is found wherever it sits in the queue.
        meets = [
            text
            for text, _ in self.store.queued_requirements()
            if unmet(json.loads(text), entry.capabilities) is None
        ]
        lease_id = secrets.token_urlsafe(18)
        job = self.store.lease(entry.id, meets, lease_id, self.settings.LEASE_S)
        if job is None or job.lease_deadline is None:
            return None
        self.hub.publish_status(job.id, job.status, None, job.attempts, relayed=True)
        return LeaseGrant(
            job.id,
            lease_id,
            job.attempts,
            job.spec,
            job.requirements,
            job.lease_deadline,
            self.settings.JOB_TIMEOUT_S,
        )
