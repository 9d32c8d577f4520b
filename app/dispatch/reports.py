"""What workers report on the jobs they hold: heartbeats, progress, results, failures
and leases given back. Posting the same result twice is harmless."""

from __future__ import annotations

from app.dispatch.core import DispatcherCore, NotYours, Verdict, cap_text
from app.runs.profile import keep_profile
from app.store import JobRow, NewRun, now
from workers.protocol import (
    ARTIFACT_NAMES,
    FINAL_STATUSES,
    JobStatus,
    ProgressEvent,
    RunResult,
)


class ReportsMixin(DispatcherCore):
    """The dispatcher's answers to a worker's reports."""

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
