"""The rows the job store reads: a job, a run, a worker, and what `finish_job` stores.

The tables themselves are in app.store.ddl, their versions in app.store.migrations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from workers.protocol import JobStatus

JOB_COLUMNS = (
    "id, spec, workload, path, requirements, status, reason, stderr_tail, attempts, "
    "created_at, updated_at, queued_at, lease_owner, lease_deadline, worker_id, client, lease_id, "
    "leased_at"
)
"""The columns `JobRow.from_row` reads, in its order."""


@dataclass(frozen=True)
class JobRow:
    """A job as stored."""

    id: str
    spec: dict[str, Any]
    workload: str
    path: str
    requirements: dict[str, Any]
    status: JobStatus
    reason: str | None
    stderr_tail: str | None
    attempts: int
    created_at: float
    updated_at: float
    queued_at: float
    lease_owner: str | None
    lease_deadline: float | None
    worker_id: str | None
    client: str | None
    lease_id: str | None = None
    """The current lease's random id while running (reports must present it)."""
    leased_at: float | None = None
    """When the current lease began, on the database's clock."""

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> JobRow:
        """A job from the columns of JOB_COLUMNS, in order."""
        (id_, spec, workload, path, requirements, status, reason, stderr_tail, attempts,
         created_at, updated_at, queued_at, lease_owner, lease_deadline, worker_id, client,
         lease_id, leased_at) = row  # fmt: skip
        return cls(
            id=id_,
            spec=json.loads(spec),
            workload=workload,
            path=path,
            requirements=json.loads(requirements),
            status=JobStatus(status),
            reason=reason,
            stderr_tail=stderr_tail,
            attempts=int(attempts),
            created_at=float(created_at),
            updated_at=float(updated_at),
            queued_at=float(queued_at),
            lease_owner=lease_owner,
            lease_deadline=None if lease_deadline is None else float(lease_deadline),
            worker_id=worker_id,
            client=client,
            lease_id=lease_id,
            leased_at=None if leased_at is None else float(leased_at),
        )


@dataclass(frozen=True)
class RunRow:
    """A stored run: the result JSON (artifacts capped) and which artifacts were cut."""

    id: int
    job_id: str
    attempt: int
    worker_id: str | None
    result: str
    truncated: list[str]
    run_s: float | None
    created_at: float
    artifact_names: list[str]
    followup: FollowUp | None = None
    """The job that brings this run's dumps (`workers.protocol.dumps`), if it has one."""


@dataclass(frozen=True)
class FollowUp:
    """A follow-up job as the run it completes shows it: its id, status and reason, and
    the artifacts it has yet to bring (none once it is done: they are merged in)."""

    job_id: str
    status: str
    reason: str | None
    pending: list[str]


@dataclass(frozen=True)
class WorkerRow:
    """A registered worker, as every replica sees it."""

    id: str
    name: str | None
    capabilities: dict[str, Any]
    registered_at: float
    last_heartbeat: float
    current_job: str | None
    polling: bool = False
    """It waits in a lease request now (on whichever replica)."""
    age_s: float = 0.0
    """Seconds since it was last heard from, on the database's clock."""


@dataclass(frozen=True)
class NewRun:
    """What `Store.finish_job` stores for a completed job."""

    result_json: str
    truncated: list[str]
    valid: bool
    stage_seconds: dict[str, float | None]
    run_s: float | None
    artifacts: dict[str, tuple[str, bool]]  # name -> (text, cut at ARTIFACT_MAX_BYTES)
