"""What workers report on the jobs they hold: heartbeats, progress, results, failures
and leases given back. Posting the same result twice is harmless."""

from __future__ import annotations

from app.dispatch.core import DispatcherCore, LeaseEnded, UnknownWorker, Verdict
from app.dispatch.results import Prepared
from app.store import JobRow, NewRun
from app.store.profiles import keep_profile
from workers.protocol import FINAL_STATUSES, JobStatus, ProgressEvent
from workers.protocol.gate import runs_anything


class ReportsMixin(DispatcherCore):
    """The dispatcher's answers to a worker's reports."""

    def heartbeat(self, worker_id: str, job_id: str | None, lease_id: str | None) -> Verdict:
        """Keep a worker, and its lease on `job_id`, alive (LeaseEnded once it has ended)."""
        if self.store.touch_worker(worker_id) is None:
            raise UnknownWorker(worker_id)
        if job_id is None:
            return Verdict(True, JobStatus.QUEUED)
        if lease_id and self.store.extend_lease(job_id, lease_id, worker_id, self.settings.LEASE_S):
            return Verdict(True, JobStatus.RUNNING)
        self._lease_of(worker_id, job_id, lease_id)  # raises: says why it ended
        return Verdict(True, JobStatus.RUNNING)  # (it ended and came back? never)

    def progress(
        self, worker_id: str, job_id: str, lease_id: str | None, events: list[ProgressEvent]
    ) -> Verdict:
        """Pass on progress of a job under the worker's current lease; never stored. The
        lease check and the message to the other replicas are one statement."""
        out = self.hub.progress_out(job_id, events)
        if not lease_id or not self.store.holds_lease(job_id, lease_id, worker_id, out.payload):
            self._lease_of(worker_id, job_id, lease_id)  # raises: says why it ended
        self.hub.publish_progress_out(out, relayed=True)
        return Verdict(True, JobStatus.RUNNING)

    def complete(
        self,
        worker_id: str,
        job_id: str,
        lease_id: str | None,
        prepared: Prepared,
        run_s: float | None,
        *,
        read: JobRow | None = None,
    ) -> Verdict:
        """Store a gated run (`app.dispatch.results.prepare`) and mark its job done. The
        attempt is the server's count, never the report's; a second post of the same
        result finds the lease ended. A run that is not valid, or that ran nothing (compile only),
        keeps no whole-job time.
        `read`: the job as the caller read it just now (storing checks the lease again)."""
        self._lease_of(worker_id, job_id, lease_id, read)
        settings = self.settings
        # After the gate: the trace of a run that is not valid was dropped there.
        run = keep_profile(self.store, job_id, prepared.run, settings.PROFILE_MAX_BYTES)
        entry = self.recent_worker(worker_id)
        roofs = entry.capabilities.ceilings if entry is not None else None
        if entry is not None and roofs is not None:  # the roofs of the run's roofline
            named = roofs.model_copy(update={"worker": entry.name or entry.id})
            run = run.model_copy(update={"ceilings": named})
        stored = NewRun(
            result_json=run.model_dump_json(),
            truncated=prepared.truncated,
            valid=run.valid,
            stage_seconds=run.stage_seconds.model_dump(),
            run_s=run_s if run.valid and runs_anything(run.job.stages) else None,
            artifacts=prepared.artifacts,
        )
        assert lease_id is not None  # (_lease_of held it)
        attempt = self.store.finish_job(job_id, lease_id, worker_id, stored)
        if attempt is None:  # the lease ended while the result was being prepared
            current = self.store.get_job(job_id)
            if current is None:
                raise LookupError(job_id)
            if current.status not in FINAL_STATUSES:
                raise LeaseEnded(self._ended_verdict(current))
            return Verdict(False, current.status)
        self.hub.publish_status(job_id, JobStatus.DONE, None, attempt, relayed=True)
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
            from_statuses=(JobStatus.RUNNING,),
            lease_id=lease_id,
            stderr_tail=stderr_tail,
        )
        if ended is not None:
            self._announce(ended)
            return Verdict(True, ended.status)
        current = self.store.get_job(job_id)
        return Verdict(False, current.status if current else JobStatus.FAILED)

    def release(self, worker_id: str, job_id: str, lease_id: str | None) -> Verdict:
        """A worker gives a lease back (it is shutting down): the job is queued again,
        without counting the attempt."""
        self._lease_of(worker_id, job_id, lease_id)
        assert lease_id is not None  # (_lease_of held it)
        job = self.store.requeue(
            job_id, lease_id, f"given back by worker {worker_id}", count_attempt=False
        )
        if job is not None:
            self._announce(job)  # queued again: wakes lease requests on every replica
        return Verdict(True, JobStatus.QUEUED)
