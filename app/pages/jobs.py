"""A job as JSON: the one shape the API returns (`/api/v1/jobs/{id}`) and every page builds
its context from (runs, comparisons, matrices), so a page never says more than the API."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from app.dispatch import Dispatcher
from app.store import JobRow
from app.store.schema import FollowUp
from workers.protocol import JobStatus

PREFIX = "/api/v1"
"""Where the JSON API lives; the job's links point into it."""


def iso(ts: float) -> str:
    """A timestamp as ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def job_links(job_id: str) -> dict[str, str]:
    base = f"{PREFIX}/jobs/{job_id}"
    return {"self": base, "events": f"{base}/events", "cancel": f"{base}/cancel"}


def job_summary(job: JobRow, dispatcher: Dispatcher) -> dict[str, Any]:
    """The JSON of a job without its run."""
    spec = job.spec
    progress = dispatcher.hub.latest(job.id) if job.status == JobStatus.RUNNING else None
    return {
        "id": job.id,
        "status": job.status.value,
        "reason": dispatcher.waiting_reason(job),
        "attempts": job.attempts,
        "workload": job.workload,
        "path": job.path,
        "params": spec.get("params", {}),
        "stages": spec.get("stages", []),
        "measure": spec.get("measure", {}),
        "target": spec.get("target"),
        "compiler_options": spec.get("compiler_options") or {},
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "worker_id": job.worker_id,
        "worker_name": dispatcher.worker_name(job.worker_id),
        "progress": progress.model_dump(exclude_none=True) if progress else None,
        "stderr_tail": job.stderr_tail,
        "links": job_links(job.id),
    }


def job_public(job: JobRow, dispatcher: Dispatcher) -> dict[str, Any]:
    """The JSON of a job with its run inline (artifacts capped, linked in full)."""
    out = job_summary(job, dispatcher)
    run = dispatcher.store.get_run(job.id) if job.status == JobStatus.DONE else None
    if run is None:
        out["run"] = None
        out["dumps"] = None
        return out
    result: dict[str, Any] = json.loads(run.result)
    base = f"{PREFIX}/jobs/{job.id}/artifacts"
    result.update(
        attempt=run.attempt,
        worker_id=run.worker_id,
        stored_at=iso(run.created_at),
        artifact_links={name: f"{base}/{name}" for name in run.artifact_names},
        artifacts_truncated=run.truncated,
        run_seconds=run.run_s,
    )
    out["run"] = result
    out["dumps"] = followup_json(run.followup)
    return out


def followup_json(followup: FollowUp | None) -> dict[str, Any] | None:
    """The follow-up job that brings a run's dumps (`workers.protocol.dumps`): its id and
    page, status and reason, and what it has yet to bring (nothing once it is done)."""
    if followup is None:
        return None
    return {
        "job": followup.job_id,
        "status": followup.status,
        "reason": followup.reason,
        "pending": followup.pending,
        "links": job_links(followup.job_id),
    }
