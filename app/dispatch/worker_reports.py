"""What workers report on the jobs they hold: heartbeats, progress, results, failures
and leases given back. Posting the same result twice is harmless."""

from __future__ import annotations

import contextlib
import time

from app.dispatch.core import Ack, DispatcherCore, LeaseEnded, UnknownWorker
from app.dispatch.results import Prepared
from app.store import JobRow, NewJob, NewRun
from app.store.profiles import keep_profile
from workers.catalog.published import run_seconds
from workers.protocol import FINAL_STATUSES, BoundaryId, Dumps, JobStatus, ProgressEvent
from workers.protocol.dumps import dumps_job_id, wants_followup


def _held(job: JobRow | None) -> float | None:
    """Seconds since the job's current lease began, or None when not known."""
    if job is None or job.leased_at is None:
        return None
    return max(0.0, time.time() - job.leased_at)


class ReportsMixin(DispatcherCore):
    """The dispatcher's answers to a worker's reports."""

    def heartbeat(self, worker_id: str, job_id: str | None, lease_id: str | None) -> Ack:
        """Keep a worker, and its lease on `job_id`, alive (LeaseEnded once it has ended)."""
        if self.store.touch_worker(worker_id) is None:
            raise UnknownWorker(worker_id)
        if job_id is None:
            return Ack(True, JobStatus.QUEUED)
        if lease_id and self.store.extend_lease(job_id, lease_id, worker_id, self.settings.LEASE_S):
            return Ack(True, JobStatus.RUNNING)
        self._lease_of(worker_id, job_id, lease_id)  # raises: says why it ended
        return Ack(True, JobStatus.RUNNING)  # (it ended and came back? never)

    def progress(
        self, worker_id: str, job_id: str, lease_id: str | None, events: list[ProgressEvent]
    ) -> Ack:
        """Pass on progress of a job under the worker's current lease; never stored. The
        lease check and the message to the other replicas are one statement."""
        out = self.hub.progress_out(job_id, events)
        if not lease_id or not self.store.holds_lease(job_id, lease_id, worker_id, out.payload):
            self._lease_of(worker_id, job_id, lease_id)  # raises: says why it ended
        self.hub.publish_progress_out(out, relayed=True)
        return Ack(True, JobStatus.RUNNING)

    def complete(
        self,
        worker_id: str,
        job_id: str,
        lease_id: str | None,
        prepared: Prepared,
        run_s: float | None,
        *,
        read: JobRow | None = None,
    ) -> Ack:
        """Store a gated run (`app.dispatch.results.prepare`) and mark its job done. The
        attempt is the server's count, never the report's; a second post of the same
        result finds the lease ended. The whole-job time follows its rule
        (`workers.catalog.published.run_seconds`): none for a run that is not valid, ran
        nothing or is no speed, and none shorter than the run's own intervals or longer
        than the lease was held.
        `read`: the job as the caller read it just now (storing checks the lease again)."""
        self._lease_of(worker_id, job_id, lease_id, read)
        settings = self.settings
        # After the result gate: the trace of a run that is not valid was dropped there.
        run = keep_profile(self.store, job_id, prepared.run, settings.PROFILE_MAX_BYTES)
        entry = self.recent_worker(worker_id)
        roofs = entry.capabilities.ceilings if entry is not None else None
        if entry is not None and roofs is not None:  # the roofs of the run's roofline
            # The roofs are timed one call at a time, host-synced: no worker says otherwise.
            named = roofs.model_copy(
                update={"worker": entry.name or entry.id, "boundary": BoundaryId.HOST_SYNC}
            )
            run = run.model_copy(update={"ceilings": named})
        stored = NewRun(
            result_json=run.model_dump_json(),
            truncated=prepared.truncated,
            valid=run.valid,
            stage_seconds=run.stage_seconds.model_dump(),
            run_s=run_seconds(run, run_s, _held(read)),
            artifacts=prepared.artifacts,
        )
        assert lease_id is not None  # (_lease_of held it)
        attempt = self.store.finish_job(job_id, lease_id, worker_id, stored)
        if attempt is None:  # the lease ended while the result was being prepared
            current = self.store.get_job(job_id)
            if current is None:
                raise LookupError(job_id)
            if current.status not in FINAL_STATUSES:
                raise LeaseEnded(self._ended_ack(current))
            return Ack(False, current.status)
        self.hub.publish_status(job_id, JobStatus.DONE, None, attempt, relayed=True)
        if wants_followup(run.job, run):
            self._queue_dumps(read or self.store.get_job(job_id))
        self._call_back(self._on_ended, job_id)
        return Ack(True, JobStatus.DONE)

    def _queue_dumps(self, first: JobRow | None) -> None:
        """Queue the follow-up that brings the dumps of a run that went first
        (`workers.protocol.dumps`): the same job, asking for its dumps only, on the same
        kind of worker, at the back of the queue. It is the server's, not a submission:
        the client's rate and queue limits counted the job it completes."""
        if first is None:
            return
        spec = {**first.spec, "dumps": Dumps.ONLY.value}
        with self.store.admitting(first.client or "") as admitting:
            admitting.insert([NewJob(dumps_job_id(first.id), spec, dict(first.requirements))])
        self._notify()

    def fail(
        self,
        worker_id: str,
        job_id: str,
        lease_id: str | None,
        reason: str,
        stderr_tail: str | None,
    ) -> Ack:
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
            return Ack(True, ended.status)
        current = self.store.get_job(job_id)
        return Ack(False, current.status if current else JobStatus.FAILED)

    def refuse_environment(
        self, worker_id: str, job_id: str, lease_id: str | None, problems: list[tuple[str, str]]
    ) -> None:
        """End a job failed whose result names an environment that is not its worker's
        (the checked rules: `workers.catalog.rule_checks.environment`): the run is no
        result of it."""
        said = "; ".join(f"{f}: {m}" for f, m in problems)
        with contextlib.suppress(LeaseEnded, UnknownWorker, LookupError):
            self.fail(
                worker_id,
                job_id,
                lease_id,
                f"the result was refused: its environment is not the worker's ({said})",
                None,
            )

    def release(self, worker_id: str, job_id: str, lease_id: str | None) -> Ack:
        """A worker gives a lease back (it is shutting down): the job is queued again,
        without counting the attempt."""
        self._lease_of(worker_id, job_id, lease_id)
        assert lease_id is not None  # (_lease_of held it)
        job = self.store.requeue(
            job_id, lease_id, f"given back by worker {worker_id}", count_attempt=False
        )
        if job is not None:
            self._announce(job)  # queued again: wakes lease requests on every replica
        return Ack(True, JobStatus.QUEUED)
