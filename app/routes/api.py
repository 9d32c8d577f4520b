"""The public JSON API under /api/v1: submit and follow jobs, list workloads and workers.

Reads answer GET and HEAD. Submission is strict (see app.queue.submission). A job's run is
returned inline with its artifacts capped; each artifact links to its full text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from app.deps import AdmissionDep, DispatcherDep, SettingsDep
from app.dispatch import Dispatcher
from app.ir.pipeline import PIPELINE_ARTIFACT
from app.pages.jobs import PREFIX, iso, job_links, job_public, job_summary
from app.pages.targets import targets_public
from app.queue.submission import read_json_body, validate_submission
from app.routes.request_schemas import job_request_schema
from app.routes.routing import reads
from app.routes.schemas import (
    SUBMIT_ERRORS,
    JobPublic,
    JobsPublic,
    MessagePublic,
    TargetsPublic,
    WorkerPublic,
    WorkersPublic,
    WorkloadsPublic,
    refusing,
)
from app.store import JobRow
from workers.catalog import catalog_listing
from workers.protocol import ARTIFACT_NAMES, FINAL_STATUSES, JobStatus, PathId

router = APIRouter(prefix=PREFIX, tags=["jobs"])

read_route = reads(router)


JOB_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": job_request_schema()}},
    }
}
ERRORS = refusing(
    SUBMIT_ERRORS,
    "a Pallas kernel's block sizes and backend against the problem and the path, a scale "
    "workload's devices against its target's count, the files an upload's job names "
    "(params.artifact, inputs, reference) being stored, and the job's estimated peak under "
    "this server's byte cap (BOUNDARY_MAX_JOB_BYTES)",
)


def _job_or_404(job_id: str, dispatcher: Dispatcher) -> JobRow:
    job = dispatcher.store.get_job(job_id) if len(job_id) <= 64 else None
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
    return job


def existing_job(job_id: str, dispatcher: DispatcherDep) -> JobRow:
    """Dependency: the job named in the URL, or 404 before any response starts."""
    return _job_or_404(job_id, dispatcher)


ExistingJob = Annotated[JobRow, Depends(existing_job)]


@router.post(
    "/jobs",
    status_code=202,
    response_model=JobPublic,
    responses=ERRORS,
    openapi_extra=JOB_BODY,
    summary="Submit a job",
)
async def submit_job(
    request: Request, settings: SettingsDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> JSONResponse:
    """Queue a job: a workload with its parameters, a path, stages and measurement options."""
    admission.check_bearer(request, "job submission")
    data = await read_json_body(request, settings.MAX_BODY_BYTES)
    valid = validate_submission(data, dispatcher.store, settings.MAX_JOB_BYTES)
    (job,) = admission.queue(admission.client(request), [valid])
    body = job_public(job, dispatcher)
    return JSONResponse(body, status_code=202, headers={"Location": body["links"]["self"]})


@read_route("/jobs", response_model=JobsPublic, summary="List jobs")
async def list_jobs(
    dispatcher: DispatcherDep,
    workload: Annotated[str | None, Query(max_length=64)] = None,
    path: PathId | None = None,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JSONResponse:
    """Jobs, newest first, filtered by workload, path and status."""
    jobs, count = dispatcher.store.list_jobs(
        workload, path.value if path else None, status.value if status else None, limit
    )
    return JSONResponse({"data": [job_summary(j, dispatcher) for j in jobs], "count": count})


@read_route(
    "/jobs/{job_id}",
    response_model=JobPublic,
    responses={404: {"model": MessagePublic}},
    summary="Get a job and its run",
)
async def get_job(job: ExistingJob, dispatcher: DispatcherDep) -> JSONResponse:
    """The job's status (with the reason when it failed, expired or waits) and its run."""
    return JSONResponse(job_public(job, dispatcher))


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobPublic,
    responses={404: {"model": MessagePublic}, 409: {"model": MessagePublic}},
    summary="Cancel a job",
)
async def cancel_job(
    request: Request, job: ExistingJob, dispatcher: DispatcherDep, admission: AdmissionDep
) -> JSONResponse:
    """Cancel a queued or running job (a running one stops at the worker's next heartbeat)."""
    admission.check_bearer(request, "cancelling a job")
    if not dispatcher.cancel(job.id):
        current = _job_or_404(job.id, dispatcher)
        raise HTTPException(status_code=409, detail=f"the job has already ended ({current.status})")
    return JSONResponse(job_public(_job_or_404(job.id, dispatcher), dispatcher))


@read_route(
    "/jobs/{job_id}/artifacts/{name}",
    response_class=PlainTextResponse,
    responses={
        404: {
            "description": "No such job or artifact.",
            # JSON, unlike the text/plain success: said outright, or FastAPI documents the
            # error under the route's own media type.
            "content": {"application/json": {"schema": MessagePublic.model_json_schema()}},
        }
    },
    summary="Full text of an artifact",
)
async def get_artifact(job: ExistingJob, name: str, dispatcher: DispatcherDep) -> PlainTextResponse:
    """The full IR text a run produced: jaxpr, stablehlo, hlo, ptx, sass, and a Pallas
    kernel's own mosaic, triton or mosaic_gpu, or a TPU target's bundles; `pipeline` is
    its pass pipeline and GPU compiler reports, as JSON (`PipelineCapture`)."""
    known = (*ARTIFACT_NAMES, PIPELINE_ARTIFACT)
    found = dispatcher.store.get_artifact(job.id, name) if name in known else None
    if found is None:  # what this run has, not every name there is
        run = dispatcher.store.get_run(job.id)
        has = ", ".join(run.artifact_names) if run is not None and run.artifact_names else None
        listed = f"it has {has}" if has else f"it has none: the job is {job.status.value}"
        raise HTTPException(
            status_code=404, detail=f"the job has no artifact {name[:40]!r} ({listed})"
        )
    text, cut = found
    headers = {"X-Boundary-Truncated": "true"} if cut else {}
    media = "application/json" if name == PIPELINE_ARTIFACT else "text/plain"
    return PlainTextResponse(text, headers=headers, media_type=media)


@router.get(
    "/jobs/{job_id}/events",
    response_class=EventSourceResponse,
    responses={404: {"model": MessagePublic}},
    summary="Follow a job (server-sent events)",
)
async def job_events(job: ExistingJob, dispatcher: DispatcherDep) -> AsyncIterator[ServerSentEvent]:
    """`status` events on each state change and throttled `progress` events while it runs;
    the stream ends after a final status."""
    with dispatcher.hub.subscribe(job.id) as queue:
        current = dispatcher.store.get_job(job.id) or job  # re-read: we now miss nothing
        yield ServerSentEvent(event="status", data=_status_data(current, dispatcher))
        if current.status in FINAL_STATUSES:
            return
        latest = dispatcher.hub.latest(job.id)
        if latest is not None:
            yield ServerSentEvent(event="progress", data=latest.model_dump(exclude_none=True))
        while True:
            notice = await queue.get()
            if notice.kind == "status":
                fresh = dispatcher.store.get_job(job.id) or current
                yield ServerSentEvent(event="status", data=_status_data(fresh, dispatcher))
                if fresh.status in FINAL_STATUSES:
                    return
            else:
                yield ServerSentEvent(event="progress", data=notice.data)


def _status_data(job: JobRow, dispatcher: Dispatcher) -> dict[str, Any]:
    return {
        "id": job.id,
        "status": job.status.value,
        "reason": dispatcher.waiting_reason(job),
        "attempts": job.attempts,
        "links": job_links(job.id),
    }


@read_route(
    "/workloads",
    response_model=WorkloadsPublic,
    tags=["catalog"],
    summary="List workloads",
)
async def list_workloads() -> JSONResponse:
    """Every workload with its parameters' JSON Schema."""
    data = catalog_listing()
    return JSONResponse({"data": data, "count": len(data)})


@read_route(
    "/targets",
    response_model=TargetsPublic,
    tags=["catalog"],
    summary="List targets",
)
async def list_targets(dispatcher: DispatcherDep) -> JSONResponse:
    """Every target: its size, what one device may hold (usable_bytes: on a TPU what
    libtpu makes available, as a connected worker read it; on a GPU JAX's default share)
    beside the published HBM, which connected workers compile for it or could run it,
    and each chip's published figures (HBM, bandwidth, peak rates, clock) with sources."""
    return JSONResponse(targets_public(dispatcher))


@read_route(
    "/workers",
    response_model=WorkersPublic,
    tags=["workers"],
    summary="List connected workers",
)
async def list_workers(dispatcher: DispatcherDep) -> JSONResponse:
    """Workers heard from recently, with their capabilities and current job."""
    data = []
    for w in dispatcher.connected_workers():
        caps = w.capabilities
        item = WorkerPublic(
            id=w.id,
            name=w.name,
            platform=caps.platform.value,
            paths=caps.paths,
            device_kind=caps.device_kind,
            device_count=caps.device_count,
            max_virtual_devices=caps.max_virtual_devices,
            cuda_compile=caps.cuda_compile,
            cuda_run=caps.cuda_run,
            targets=caps.targets,
            capacities=caps.capacities,
            jax_version=caps.jax_version,
            hostname=caps.hostname,
            registered_at=iso(w.registered_at),
            last_heartbeat=iso(w.last_seen),
            last_heartbeat_age_s=round(w.age_s, 3),
            current_job=w.current_job,
            polling=w.polling,
        )
        data.append(item.model_dump(mode="json"))
    return JSONResponse({"data": data, "count": len(data)})
