"""What workers report on the jobs they hold: heartbeats, progress, results, failures
and leases given back. Posting the same result twice is harmless."""

from __future__ import annotations

from app.dispatch.core import DispatcherCore, Verdict
from app.dispatch.results import Prepared
from app.store import NewRun, now
from app.store.profiles import keep_profile
from workers.protocol import JobStatus, ProgressEvent


class ReportsMixin(DispatcherCore):
    """The dispatcher's answers to a worker's reports."""

    def heartbeat(self, worker_id: str, job_id: str | None, lease_id: str | None) -> Verdict:
        """Keep a worker, and its lease on `job_id`, alive (LeaseEnded once it has ended)."""
        entry = self.worker(worker_id)
        self._seen(entry)
        if job_id is None:
            return Verdict(True, JobStatus.QUEUED)
        job = self._lease_of(worker_id, job_id, lease_id)
        assert job.lease_id is not None
        self.store.extend_lease(job_id, job.lease_id, now() + self.settings.LEASE_S)
        self._hold(job_id, job.lease_id)
        return Verdict(True, JobStatus.RUNNING)

    def progress(
        self, worker_id: str, job_id: str, lease_id: str | None, events: list[ProgressEvent]
    ) -> Verdict:
        """Pass on progress of a job under the worker's current lease; never stored."""
        job = self._lease_of(worker_id, job_id, lease_id)
        for event in events:
            self.hub.publish_progress(job_id, event)
        return Verdict(True, job.status)

    def _ended(self, worker_id: str, job_id: str) -> None:
        self._deadlines.pop(job_id, None)
        self._worker_done(worker_id, job_id)
        self._announce(job_id)

    def complete(
        self,
        worker_id: str,
        job_id: str,
        lease_id: str | None,
        prepared: Prepared,
        run_s: float | None,
    ) -> Verdict:
        """Store a gated run (`app.dispatch.results.prepare`) and mark its job done. The
        attempt is the server's count, never the report's; a second post of the same
        result finds the lease ended. A run that is not valid keeps no whole-job time."""
        job = self._lease_of(worker_id, job_id, lease_id)
        attempt = job.attempts
        settings = self.settings
        # After the gate: the trace of a run that is not valid was dropped there.
        run = keep_profile(self.store, job_id, prepared.run, settings.PROFILE_MAX_BYTES)
        entry = self._workers.get(worker_id)
        roofs = entry.capabilities.ceilings if entry is not None else None
        if entry is not None and roofs is not None:  # the roofs of the run's roofline
            named = roofs.model_copy(update={"worker": entry.name or entry.id})
            run = run.model_copy(update={"ceilings": named})
        stored = NewRun(
            result_json=run.model_dump_json(),
            truncated=prepared.truncated,
            valid=run.valid,
            stage_seconds=run.stage_seconds.model_dump(),
            run_s=run_s if run.valid else None,
            artifacts=prepared.artifacts,
        )
        if not self.store.finish_job(job_id, attempt, worker_id, stored, now()):
            current = self.store.get_job(job_id)
            return Verdict(False, current.status if current else JobStatus.CANCELLED)
        self._ended(worker_id, job_id)
        return Verdict(True, JobStatus.DONE)

    def fail(
        self,
        worker_id: str,
        job_id: str,
        lease_id: str | None,
        reason: str,
        stderr_tail: str | None,
    ) -> Verdict:
        """Record that the worker could not run the job it holds."""
        self._lease_of(worker_id, job_id, lease_id)
        ended = self.store.end_job(
            job_id,
            JobStatus.FAILED,
            reason[:2000],
            now(),
            from_statuses=(JobStatus.RUNNING,),
            stderr_tail=stderr_tail,
        )
        self._ended(worker_id, job_id)
        current = self.store.get_job(job_id)
        return Verdict(ended, current.status if current else JobStatus.FAILED)

    def release(self, worker_id: str, job_id: str, lease_id: str | None) -> Verdict:
        """A worker gives a lease back (it is shutting down): the job is queued again,
        without counting the attempt."""
        job = self._lease_of(worker_id, job_id, lease_id)
        self.store.requeue(
            job_id,
            now(),
            f"given back by worker {worker_id}",
            count_attempt=False,
            lease_id=job.lease_id,
        )
        self._ended(worker_id, job_id)
        self._notify()
        return Verdict(True, JobStatus.QUEUED)
