"""Queueing jobs and leasing them to capable workers.

Every decision reads and writes the store without an `await` in between, so with one
event loop two lease requests can never take the same job. A lease request waits on an
asyncio event that is set whenever a job enters the queue (submitted, re-queued or
given back), never on a fixed polling sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import time

from app.dispatch.core import DispatcherCore, LeaseGrant, WorkerEntry
from app.dispatch.requirements import job_requirements, unmet
from app.store import JobRow, now
from workers.catalog import WORKLOADS
from workers.protocol import Capabilities, JobSpec, JobStatus


class LeasingMixin(DispatcherCore):
    """Jobs in (submit, cancel), workers registered, leases out."""

    # --- jobs ----------------------------------------------------------------------------

    def submit(self, spec: JobSpec, devices: int, client: str | None) -> JobRow:
        """Queue a validated job and wake the workers waiting for one."""
        job_id = secrets.token_hex(8)
        spec_json = spec.model_dump(mode="json")
        at = now()
        job = self.store.insert_job(
            job_id, spec_json, dict(job_requirements(spec, devices)), client, at
        )
        # The files it names were used now: least-recently-used eviction spares them.
        fields = getattr(WORKLOADS.get(spec.workload), "file_fields", {})
        named = [spec.params.get(name) for name in fields]
        self.store.touch_files([sha for sha in named if isinstance(sha, str)], at)
        self._notify()
        return job

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job; False if it had already ended."""
        job = self.store.get_job(job_id)
        ended = self.store.end_job(job_id, JobStatus.CANCELLED, "cancelled on request", now())
        if ended:
            self._deadlines.pop(job_id, None)
            if job is not None and job.lease_owner is not None:
                self._worker_done(job.lease_owner, job_id)
            self._announce(job_id)
        return ended

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
        capabilities) keeps its id by presenting the key its first registration got."""
        at = now()
        entry = self._workers.get(worker_id) if worker_id else None
        if (
            entry is not None
            and entry.key is not None
            and key is not None
            and hmac.compare_digest(entry.key.encode(), key.encode())
        ):
            entry.capabilities, entry.name, entry.last_seen = caps, name, at
        else:
            entry = WorkerEntry(f"w-{secrets.token_hex(8)}", name, caps, at, at)
            entry.key = secrets.token_urlsafe(24)
            self._workers[entry.id] = entry
        self.store.upsert_worker(entry.id, name, caps.model_dump(mode="json"), at)
        self._notify()  # a new worker may make a waiting job runnable
        assert entry.key is not None
        return entry.id, entry.key

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

    def stop_leasing(self) -> None:
        """Grant no more leases (the server is shutting down); waiting requests return."""
        self.leasing = False
        self._notify()

    def _try_claim(self, entry: WorkerEntry) -> LeaseGrant | None:
        if not self.leasing:
            return None
        # Group the queue by what its jobs need, keep the needs this worker meets, and take
        # the oldest job among them: a runnable job is found wherever it sits in the queue.
        meets = [
            text
            for text, _ in self.store.queued_requirements()
            if unmet(json.loads(text), entry.capabilities) is None
        ]
        for job in self.store.oldest_queued(meets):
            at = now()
            deadline = at + self.settings.LEASE_S
            lease_id = secrets.token_urlsafe(18)
            attempt = self.store.claim(job.id, entry.id, lease_id, deadline, at)
            if attempt is None:
                continue
            self._hold(job.id, lease_id)
            entry.current_job = job.id
            self.hub.publish_status(job.id, JobStatus.RUNNING, None, attempt)
            return LeaseGrant(
                job.id,
                lease_id,
                attempt,
                job.spec,
                job.requirements,
                deadline,
                self.settings.JOB_TIMEOUT_S,
            )
        return None
