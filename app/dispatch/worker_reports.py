"""What workers report on the jobs they hold: heartbeats, progress, results, failures
and leases given back. Posting the same result twice is harmless."""

from __future__ import annotations

from app.dispatch.core import (
    DispatcherCore,
    LeaseEnded,
    UnknownWorker,
    Verdict,
    WrongResult,
    cap_text,
)
from app.ir.explain import explain
from app.ir.pipeline import PIPELINE_ARTIFACT, split_pipeline
from app.store import NewRun
from app.store.profiles import keep_profile
from workers.protocol import (
    ARTIFACT_NAMES,
    FINAL_STATUSES,
    JobStatus,
    ProgressEvent,
    RunResult,
)


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
        """Pass on progress of a job under the worker's current lease; never stored."""
        job = self._lease_of(worker_id, job_id, lease_id)
        self.hub.publish_progress(job_id, *events)
        return Verdict(True, job.status)

    def complete(
        self,
        worker_id: str,
        job_id: str,
        lease_id: str | None,
        result: RunResult,
        run_s: float | None,
    ) -> Verdict:
        """Store the run of a job and mark it done. The attempt is the server's count, never
        the report's; a second post of the same result finds the lease ended."""
        job = self._lease_of(worker_id, job_id, lease_id)
        if result.job.workload != job.workload or result.job.path.value != job.path:
            raise WrongResult("the result is for another workload or path")
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
        if result.artifacts.hlo:  # the summary that explains itself, from the run's own texts
            explained = explain(result.artifacts.hlo, result.source, result.pipeline)
            capped = capped.model_copy(update={"hlo_explained": explained})
        if result.pipeline is not None:  # stored apart: the run's JSON keeps only the steps
            stored, capped = split_pipeline(capped, settings.PIPELINE_MAX_BYTES)
            if stored is not None:
                artifacts[PIPELINE_ARTIFACT] = (stored, False)
        capped = keep_profile(self.store, job_id, capped, settings.PROFILE_MAX_BYTES)
        entry = self.recent_worker(worker_id)
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
        assert lease_id is not None  # (_lease_of held it)
        attempt = self.store.finish_job(job_id, lease_id, worker_id, run)
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
