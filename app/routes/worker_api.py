"""Endpoints workers call under /api/v1/worker, each with `Bearer <WORKER_TOKEN>`.

register → lease (long-poll) → heartbeat / progress while running → result, and release
when a worker shuts down with a lease in hand. The server assigns a worker's id when it
registers, and each lease carries a random lease id: every report on a job must present
the lease it holds. A report on a lease that has ended (expired, re-queued, given back,
finished) is answered 409 and changes nothing, so posting a result twice is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.deps import DispatcherDep, SettingsDep
from app.dispatch import Ack, LeaseEnded, UnknownWorker
from app.dispatch.results import (
    Prepared,
    artifact_header,
    environment_problems,
    lease_problems,
    prepare,
)
from app.queue.submission import field_errors
from app.routes.schemas import (
    ENDED,
    KEYED,
    RESULT_ERRORS,
    FieldError,
    HeartbeatRequest,
    LeaseReply,
    LeaseRequest,
    MessagePublic,
    ProgressReport,
    RegisterReply,
    ReleaseRequest,
    ReportReply,
    ResultReport,
    WorkerRegister,
)
from app.routes.worker_auth import authenticate, require_worker_token, unknown_worker
from app.routes.worker_messages import body_of, read_message
from app.store import WorkersFull
from app.store.profiles import screen_profile
from app.web.bodylimit import Caps
from workers.catalog import CATALOG_VERSION
from workers.protocol import PROTOCOL_VERSION, JobStatus
from workers.protocol.targets import (
    TARGET_IDS,
    TPU_TARGET_IDS,
    parse_target,
    targets_in_words,
)

HEARTBEAT_FRACTION = 0.25  # heartbeats at a quarter of the lease leave room for three misses


router = APIRouter(
    prefix="/api/v1/worker",
    tags=["worker"],
    dependencies=[Depends(require_worker_token)],
    responses={401: {"model": MessagePublic, "description": "Missing or wrong worker token."}},
)


def _reply(v: Ack) -> ReportReply:
    return ReportReply(accepted=v.accepted, status=v.status, cancel=v.cancel, reason=v.reason)


def _lease_ended(exc: LeaseEnded) -> JSONResponse:
    """409: the report's lease is not the job's current one; the body says why, and
    `cancel` tells the worker to abandon the job."""
    body = _reply(exc.ack).model_dump(mode="json")
    return JSONResponse({**body, "detail": exc.ack.reason}, status_code=409)


def _answer(worker_id: str, report: Callable[[], Ack]) -> Response:
    """Carry out one of a worker's reports on its lease and answer it: the ack, 409 for
    a lease that has ended, 404 for an unknown worker or job."""
    try:
        ack = report()
    except UnknownWorker:
        raise unknown_worker(worker_id) from None
    except LeaseEnded as exc:
        return _lease_ended(exc)
    except LookupError:
        raise HTTPException(status_code=404, detail="no such job") from None
    return JSONResponse(_reply(ack).model_dump(mode="json"))


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the request body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _version_problem(body: Any) -> str | None:
    """Which side to upgrade when the worker speaks another protocol or catalog version."""
    caps = body.get("capabilities") if isinstance(body, dict) else None
    if not isinstance(caps, dict):
        return None
    for what, ours in (("protocol", PROTOCOL_VERSION), ("catalog", CATALOG_VERSION)):
        theirs = caps.get(f"{what}_version")
        if isinstance(theirs, int) and not isinstance(theirs, bool) and theirs != ours:
            side = "the server" if theirs > ours else "the worker"
            return (
                f"{what} version mismatch: the worker has {theirs}, the server has {ours}; "
                f"upgrade {side}"
            )
    return None


def _same_versions(body: Any) -> None:
    """409 when the worker speaks another protocol or catalog version (`_version_problem`)."""
    problem = _version_problem(body)
    if problem is not None:
        raise HTTPException(status_code=409, detail=problem)


@router.post(
    "/register",
    response_model=RegisterReply,
    responses={
        409: {"model": MessagePublic, "description": "Versions differ."},
        429: {"model": MessagePublic, "description": "MAX_WORKERS workers are connected."},
    },
    openapi_extra=body_of(WorkerRegister),
)
async def register(
    request: Request, dispatcher: DispatcherDep, settings: SettingsDep
) -> RegisterReply:
    """Record a worker's capabilities; the reply says how often to heartbeat."""
    message = await read_message(request, WorkerRegister, check=_same_versions)
    caps = message.capabilities
    unknown = [t for t in caps.targets if t not in TARGET_IDS]
    unread = [
        t
        for t, usable in caps.capacities.items()
        if t not in TPU_TARGET_IDS
        or t not in caps.targets
        or usable > 2 * parse_target(t).chip.device_hbm_bytes
    ]
    if unknown:
        # A worker lists what it compiles for; the server leases by these ids and shows them,
        # so an id this build does not know is refused rather than stored.
        field_errors(
            [
                (
                    "capabilities.targets",
                    f"unknown target {unknown[0][:40]!r}: this server knows "
                    f"{targets_in_words()} (GET /api/v1/targets lists them)",
                )
            ]
        )
    if unread:
        # A usable figure is libtpu's, for a TPU target the worker compiles for.
        field_errors(
            [
                (
                    "capabilities.capacities",
                    f"{unread[0][:40]!r}: a figure for a TPU target this worker lists in its "
                    "targets, at most twice the chip's published HBM per device",
                )
            ]
        )
    try:
        worker_id, key = dispatcher.register(
            message.capabilities, message.name, message.worker_id, message.worker_key
        )
    except WorkersFull as exc:
        raise HTTPException(
            status_code=429,
            detail=f"this server already has its maximum of {exc.cap:,} connected workers "
            f"(BOUNDARY_MAX_WORKERS); a worker that stops is no longer counted "
            f"{exc.stale_s:g} s after it was last heard from",
            headers={"Retry-After": "1"},
        ) from None
    return RegisterReply(
        worker_id=worker_id,
        worker_key=key,
        lease_s=settings.LEASE_S,
        heartbeat_s=settings.LEASE_S * HEARTBEAT_FRACTION,
        poll_s=settings.POLL_S,
        job_timeout_s=settings.JOB_TIMEOUT_S,
        artifact_max_bytes=settings.ARTIFACT_MAX_BYTES,
    )


@router.post(
    "/lease",
    response_model=LeaseReply,
    responses={
        **KEYED,
        204: {"description": "No job came within the wait."},
        404: {"model": MessagePublic},
    },
    openapi_extra=body_of(LeaseRequest),
)
async def lease(request: Request, dispatcher: DispatcherDep, settings: SettingsDep) -> Response:
    """Wait (long-poll, up to POLL_S) for a job this worker can run."""
    message = await read_message(request, LeaseRequest)
    authenticate(dispatcher, message)
    wait_s = settings.POLL_S if message.wait_s is None else min(message.wait_s, settings.POLL_S)
    # Wait for a job or for the worker to hang up (it is stopping), whichever comes first,
    # so that a departed worker is never handed a job and the server can shut down.
    leasing = asyncio.create_task(dispatcher.lease(message.worker_id, wait_s))
    hang_up = asyncio.create_task(_disconnected(request))
    await asyncio.wait({leasing, hang_up}, return_when=asyncio.FIRST_COMPLETED)
    gone = hang_up.done()
    hang_up.cancel()
    if not leasing.done():
        leasing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leasing
        return Response(status_code=204)
    try:
        grant = leasing.result()
    except UnknownWorker:
        raise unknown_worker(message.worker_id) from None
    if grant is None:
        return Response(status_code=204)
    if gone:  # a job came just as the worker left: give it straight back
        dispatcher.release(message.worker_id, grant.job_id, grant.lease_id)
        return Response(status_code=204)
    reply = LeaseReply(
        job_id=grant.job_id,
        lease_id=grant.lease_id,
        attempt=grant.attempt,
        spec=grant.spec,
        requirements=grant.requirements,
        lease_deadline=grant.lease_deadline,
        timeout_s=grant.timeout_s,
    )
    return JSONResponse(reply.model_dump(mode="json"))


@router.post(
    "/heartbeat",
    response_model=ReportReply,
    responses=ENDED,
    openapi_extra=body_of(HeartbeatRequest),
)
async def heartbeat(request: Request, dispatcher: DispatcherDep) -> Response:
    """Extend the lease on the worker's job (409 with `cancel` once it has ended)."""
    message = await read_message(request, HeartbeatRequest)
    authenticate(dispatcher, message)
    return _answer(
        message.worker_id,
        lambda: dispatcher.heartbeat(message.worker_id, message.job_id, message.lease_id),
    )


@router.post(
    "/progress", response_model=ReportReply, responses=ENDED, openapi_extra=body_of(ProgressReport)
)
async def progress(request: Request, dispatcher: DispatcherDep) -> Response:
    """Fine-grained progress of a running job: kept in memory and streamed, never stored."""
    message = await read_message(request, ProgressReport)
    authenticate(dispatcher, message)
    return _answer(
        message.worker_id,
        lambda: dispatcher.progress(
            message.worker_id, message.job_id, message.lease_id, message.events
        ),
    )


@router.post(
    "/result",
    response_model=ReportReply,
    responses=RESULT_ERRORS,
    openapi_extra=body_of(ResultReport, exactly_one=("result", "failure")),
)
async def result(request: Request, dispatcher: DispatcherDep, settings: SettingsDep) -> Response:
    """The run of a job, or why it failed. Posting the same report twice is harmless.

    A run is the server's to judge: it is refused (422 naming the field) unless it is the
    job its lease carries, and stored only as the result gate returns it. Parsing,
    gating, capping, explaining and measuring how far a trace inflates run off the event
    loop: a large result does not stall other requests."""
    limit = Caps.from_settings(settings).result
    message = await read_message(request, ResultReport, limit=limit, off_loop=True)
    authenticate(dispatcher, message)
    if (message.result is None) == (message.failure is None):
        field_errors([("result", "send exactly one of result and failure")])
    if message.result is None:
        assert message.failure is not None
        failure = message.failure
        return _answer(
            message.worker_id,
            lambda: dispatcher.fail(
                message.worker_id,
                message.job_id,
                message.lease_id,
                failure.reason,
                failure.stderr_tail,
            ),
        )
    posted = message.result
    job = dispatcher.store.get_job(message.job_id)
    header = await run_in_threadpool(artifact_header, dispatcher.store, posted)
    if job is not None:
        problems = lease_problems(job.spec, posted, header)
        if problems:
            field_errors(list(problems))
    entry = dispatcher.recent_worker(message.worker_id)
    elsewhere = environment_problems(posted, entry.capabilities) if entry is not None else []
    if elsewhere:  # no result of this job: it ends failed, and is not queued again
        dispatcher.refuse_environment(
            message.worker_id, message.job_id, message.lease_id, elsewhere
        )
        refused = ReportReply(
            accepted=False,
            status=JobStatus.FAILED,
            cancel=True,
            reason="the result's environment is not the worker's",
            detail=[FieldError(field=f, message=m) for f, m in elsewhere],
        )
        return JSONResponse(refused.model_dump(mode="json"), status_code=409)

    def gated() -> Prepared:
        prepared = prepare(
            posted,
            artifact_max_bytes=settings.ARTIFACT_MAX_BYTES,
            inline_bytes=settings.INLINE_ARTIFACT_BYTES,
            pipeline_max_bytes=settings.PIPELINE_MAX_BYTES,
            header=header,
        )
        prepared.run = screen_profile(prepared.run)  # inflates the trace, bounded
        return prepared

    prepared = await run_in_threadpool(gated)
    return _answer(
        message.worker_id,
        lambda: dispatcher.complete(
            message.worker_id,
            message.job_id,
            message.lease_id,
            prepared,
            message.run_seconds,
            read=job,
        ),
    )


@router.get(
    "/files/{sha256}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: {"model": MessagePublic}},
)
async def get_file(sha256: str, dispatcher: DispatcherDep) -> Response:
    """A stored file (an exported function or an .npz) a job names by its SHA-256,
    streamed chunk by chunk from the store, whichever replica it was uploaded to (it
    is never held whole in the server's memory)."""
    store = dispatcher.store
    info = store.file_info(sha256) if len(sha256) == 64 else None
    chunks = store.file_chunks(sha256) if info is not None else None
    if info is None or chunks is None:
        raise HTTPException(status_code=404, detail=f"no file {sha256[:64]!r} on this server")
    # A sync iterator: Starlette reads each chunk in its thread pool, off the event loop.
    return StreamingResponse(
        chunks,
        media_type="application/octet-stream",
        headers={"Content-Length": str(info.size)},
    )


@router.post(
    "/release", response_model=ReportReply, responses=ENDED, openapi_extra=body_of(ReleaseRequest)
)
async def release(request: Request, dispatcher: DispatcherDep) -> Response:
    """Give a lease back (the worker is shutting down); the job is queued again."""
    message = await read_message(request, ReleaseRequest)
    authenticate(dispatcher, message)
    return _answer(
        message.worker_id,
        lambda: dispatcher.release(message.worker_id, message.job_id, message.lease_id),
    )
