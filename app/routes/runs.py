"""The bench's pages: a run's live progress and full result, history and workers (the
run form is `app.routes.run_form`). Each page has a fragment (htmx) and a JSON twin
built from the same job JSON the API returns."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any
from urllib.parse import parse_qsl

import anyio
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, StateDep
from app.dispatch import Dispatcher
from app.ir.pipeline import GPU_REPORTS, PASS_PIPELINE
from app.ir.view import SourceText
from app.pages.jobs import job_public
from app.pages.runs.profile import chrome_trace, profile_response, profile_view
from app.pages.runs.timeline import KEYS_HELP, TraceTooLarge, timeline_urls, viewer_trace
from app.pages.runs.views import run_context, samples_csv, shape_and_dtype, variant_of
from app.pages.uploaded import artifact_of, program_facts, sent_lines, source_cells
from app.queue.submission import read_capped_body
from app.reader.card_jobs import card_for_job, check_claims
from app.routes.common import IrQueryDep, is_htmx, render
from app.routes.errors import MissingPart
from app.routes.routing import Endpoint, reads
from app.state import AppState
from app.web.bodylimit import PAGE_FORM_BYTES
from workers.catalog import WORKLOADS
from workers.protocol import ARTIFACT_NAMES, FINAL_STATUSES, JobStatus, PathId
from workers.protocol.dumps import DUMP_ARTIFACTS

router = APIRouter(include_in_schema=False)

read_route = reads(router)


def page_route(path: str) -> Callable[[Endpoint], Endpoint]:
    """Register an HTML page for GET and HEAD."""
    return read_route(path, response_class=HTMLResponse)


def _job_json(job_id: str, dispatcher: Dispatcher) -> dict[str, Any]:
    job = dispatcher.store.get_job(job_id) if len(job_id) <= 64 else None
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
    return job_public(job, dispatcher)


def _pipeline_label(run: dict[str, Any]) -> str | None:
    """What the run's /pipeline page is called in links to it; None when it has none (a
    Pallas kernel's own passes are listed there too)."""
    pipeline = run.get("pipeline")
    if not pipeline:
        return PASS_PIPELINE if run.get("kernel_pipelines") else None
    return PASS_PIPELINE if pipeline.get("steps") else GPU_REPORTS


def _public_base(state: AppState, request: Request) -> str:
    return (state.settings.PUBLIC_BASE_URL or str(request.base_url)).rstrip("/")


@router.api_route("/runs/{job_id}.json", methods=["GET", "HEAD"])
async def run_json(job_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    return JSONResponse(_job_json(job_id, dispatcher))


@router.api_route("/runs/{job_id}/profile", methods=["GET", "HEAD"])
async def run_profile(job_id: str, state: StateDep, dispatcher: DispatcherDep) -> Response:
    """The run's profiler trace: the profiler's log directory as .tar.gz (XProf reads it)."""
    return profile_response(dispatcher.store, job_id, False, state.settings.PROFILE_MAX_BYTES)


TRACE_READERS = anyio.CapacityLimiter(2)
"""How many stored traces are unpacked (and rewritten for the viewer) at once, each in a
worker thread: a few requests for a large trace take two threads' memory, not forty."""


@router.api_route("/runs/{job_id}/profile/perfetto.json.gz", methods=["GET", "HEAD"])
async def run_profile_perfetto(job_id: str, state: StateDep, dispatcher: DispatcherDep) -> Response:
    """The trace's Chrome-format .json.gz alone, which ui.perfetto.dev opens directly."""
    max_bytes = state.settings.PROFILE_MAX_BYTES
    return await anyio.to_thread.run_sync(  # unpacks the archive
        lambda: profile_response(dispatcher.store, job_id, True, max_bytes),
        limiter=TRACE_READERS,
    )


@page_route("/runs/{job_id}/profile/timeline")
async def run_timeline(job_id: str, state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """The run's profiler trace as a timeline, in the viewer this server vendors."""
    job = _job_json(job_id, dispatcher)
    view = profile_view(job_id, job.get("run") or {})
    if view is None or view["timeline"] is None:
        raise MissingPart(
            f"run {job_id} has no profiler trace to show (a run has one when it was asked "
            'for with --profile, or "measure": {"profile": true})',
            "This run has no trace",
            ("Back to the run", f"/runs/{job_id}"),
        )
    ctx = {"job": job, "profile": view, "urls": timeline_urls(job_id), "keys": KEYS_HELP}
    return render(state, "run_timeline.html", {**ctx, "nav": "runs"})


@router.api_route("/runs/{job_id}/profile/trace.json", methods=["GET", "HEAD"])
async def run_timeline_trace(job_id: str, state: StateDep, dispatcher: DispatcherDep) -> Response:
    """The trace as the timeline viewer reads it (Chrome JSON, sent gzip-encoded); the
    download at /profile/perfetto.json.gz is the profiler's file unchanged."""
    max_bytes = state.settings.PROFILE_MAX_BYTES

    def convert() -> bytes:  # unpacks, inflates, parses and packs again: seconds, not on the loop
        return viewer_trace(chrome_trace(dispatcher.store, job_id, max_bytes))

    try:
        data = await anyio.to_thread.run_sync(convert, limiter=TRACE_READERS)
    except TraceTooLarge as exc:
        raise HTTPException(status_code=413, detail=f"{exc}; download it instead") from None
    except ValueError as exc:
        raise HTTPException(422, f"the stored trace is unreadable: {exc}") from None
    headers = {"Content-Encoding": "gzip", "Cache-Control": "no-store"}
    return Response(data, media_type="application/json", headers=headers)


@router.api_route("/runs/{job_id}/samples.csv", methods=["GET", "HEAD"])
async def run_csv(job_id: str, dispatcher: DispatcherDep) -> PlainTextResponse:
    text = samples_csv(_job_json(job_id, dispatcher))
    return PlainTextResponse(
        text,
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{job_id}-samples.csv"'},
    )


@page_route("/runs/{job_id}/ir/{name}")
async def run_ir(
    job_id: str,
    name: str,
    *,
    request: Request,
    state: StateDep,
    dispatcher: DispatcherDep,
    query: IrQueryDep,
) -> HTMLResponse:
    """One artifact, full length, paged, searchable and linked to its source (a tab's
    content). `start` pages, `q` filters to matching lines, `src` selects a source line;
    `part=lines` answers only the next page of lines (loaded on scroll)."""
    exists = len(job_id) <= 64 and dispatcher.store.get_job(job_id) is not None
    if exists and name not in ARTIFACT_NAMES:  # what this run has, not every name there is
        run_row = dispatcher.store.get_run(job_id)
        has = [n for n in (run_row.artifact_names if run_row else []) if n in ARTIFACT_NAMES]
        raise MissingPart(
            f"no IR is called {name[:20]!r} (this run has {', '.join(has) or 'none yet'})",
            "No such IR",
            ("Back to the run", f"/runs/{job_id}"),
        )
    found = dispatcher.store.get_artifact(job_id, name) if exists else None
    if exists and found is None and name in DUMP_ARTIFACTS:
        dumps = _job_json(job_id, dispatcher).get("dumps")
        if dumps is not None and name in dumps["pending"]:  # 200: it is coming, or says why not
            ctx = {"job": {"id": job_id}, "dumps": dumps, "name": name, "nav": "runs"}
            page = "_run_dumps.html" if is_htmx(request) else "ir_pending.html"
            return render(state, page, ctx)
    if exists and found is None:
        raise MissingPart(
            f"run {job_id} has no {name} (a run holds only what its path and stages produced)",
            f"This run has no {name}",
            ("Back to the run", f"/runs/{job_id}"),
        )
    if found is None:
        raise HTTPException(status_code=404, detail=f"job {job_id[:64]!r} has no {name[:20]}")
    text, cut = found
    job = _job_json(job_id, dispatcher)
    run = job.get("run")
    source = SourceText.from_run(run)
    uploaded = artifact_of(job) is not None
    # The lines sent with an uploaded program go in the source panel (never in a part).
    wanted = uploaded and source is None and query.part != "lines"
    sent = sent_lines(job, dispatcher) if wanted else None
    base = f"/runs/{job_id}/ir/{name}"
    view = query.view(name, text, base, source, request, sent=sent, uploaded=uploaded, cut=cut)
    names = [n for n in ARTIFACT_NAMES if (run or {}).get("artifacts", {}).get(n)]
    ctx = {
        "name": name,
        "names": names or [name],
        "view": view,
        "src": query.src,
        "source_sha": source.sha256 if source else "",
        "pipeline_label": _pipeline_label(run or {}),
        "download": f"/api/v1/jobs/{job_id}/artifacts/{name}",
        # Only its beginning was kept (the worker's or the server's cut at the cap).
        "cut_at": state.settings.ARTIFACT_MAX_BYTES if cut else None,
        "job_id": job_id,
        "nav": "runs",
    }
    if query.part == "lines":
        return render(state, "_ir_lines.html", ctx)
    return render(state, "_ir.html" if is_htmx(request) else "ir_page.html", ctx)


@router.get("/runs/{job_id}/dumps", response_class=HTMLResponse)
async def run_dumps(
    job_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> HTMLResponse:
    """Where a run's dumps are (the run page polls it while they are coming); once its
    follow-up is done, an htmx request is told to reload the page, which now has them."""
    job = _job_json(job_id, dispatcher)
    dumps = job.get("dumps")
    if dumps is not None and dumps["status"] == JobStatus.DONE.value and is_htmx(request):
        return HTMLResponse("", headers={"HX-Refresh": "true"})
    ctx = {"job": job, "dumps": dumps if dumps and dumps["pending"] else None, "nav": "runs"}
    return render(state, "_run_dumps.html", ctx)


@page_route("/runs/{job_id}")
async def run_page(
    job_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> HTMLResponse:
    """One job: its live progress while it runs, everything it measured once done."""
    job = _job_json(job_id, dispatcher)
    ctx = run_context(job, _public_base(state, request))
    ctx.update(nav="runs", token_needed=state.settings.SUBMIT_TOKEN is not None)
    run = ctx.get("run")
    sha = artifact_of(job)
    name, placed = program_facts(sha, dispatcher) if sha is not None else (None, None)
    ctx["function_name"] = name  # the page names the uploaded function, not "exported"
    uploaded = sha if run is not None else None
    ctx["placement"] = placed if uploaded is not None else None
    keys = [k for e in (run.hlo_explained or []) for k in e.source] if run is not None else []
    ctx["upload_source"] = source_cells(job, dispatcher, keys) if uploaded else None
    if run is not None:
        ctx["card_claims"] = _card_claims(state, dispatcher, job)
        by_bytes = request.query_params.get("explain") == "bytes"
        ctx["explain_by_bytes"] = by_bytes
        if by_bytes and run.hlo_explained:  # the biggest first; unknown sizes last
            order = sorted(
                run.hlo_explained, key=lambda e: -(e.bytes if e.bytes is not None else -1)
            )
            ctx["run"] = run.model_copy(update={"hlo_explained": order})
    return render(state, "_run.html" if is_htmx(request) else "run.html", ctx)


def _card_claims(state: AppState, dispatcher: Dispatcher, job: dict[str, Any]) -> Any:
    """When this job is a reader card's example: the card, and each of its claims checked
    against the full stored artifacts (not the inline, capped copies)."""
    matched = card_for_job(state.content, job)
    if matched is None:
        return None
    card, example = matched
    texts: dict[str, str | None] = {}
    for claim in example.claims:
        if claim.artifact not in texts:
            found = dispatcher.store.get_artifact(job["id"], claim.artifact)
            texts[claim.artifact] = found[0] if found else None
    return {
        "title": card.title,
        "link": f"/read/{card.path.value}/{card.stage.value}",
        "checks": check_claims(example, texts),
        "pallas": example is not card.job,
    }


@router.post("/runs/{job_id}/cancel", response_class=HTMLResponse)
async def cancel_run(
    job_id: str, request: Request, dispatcher: DispatcherDep, admission: AdmissionDep
) -> Response:
    """Cancel a queued or running job from its page; back to the page, which says so."""
    _job_json(job_id, dispatcher)  # 404 for a run that does not exist
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    form: dict[str, str] = {}
    if media == "application/x-www-form-urlencoded":
        body = await read_capped_body(request, PAGE_FORM_BYTES, "form")
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    admission.check_token(form.get("token"), "cancelling a run", bearer=False)
    dispatcher.cancel(job_id)  # False when it had already ended: the page shows how
    if is_htmx(request):
        # The page stays: its live stream reports the cancellation and ends cleanly.
        return Response(status_code=204)
    return RedirectResponse(f"/runs/{job_id}", status_code=303)


@router.head("/runs/{job_id}/live")
async def run_live_head(job_id: str, dispatcher: DispatcherDep) -> Response:
    """HEAD of the live stream: its headers (404 for an unknown job), no stream."""
    _job_json(job_id, dispatcher)
    return Response(
        status_code=200,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


def _known_job(job_id: str, dispatcher: DispatcherDep) -> None:
    """Dependency: 404 for an unknown job. The stream's own body runs only once the 200
    and its headers are sent, so a check there ended an empty stream with a logged 500."""
    _job_json(job_id, dispatcher)


@router.get(
    "/runs/{job_id}/live",
    response_class=EventSourceResponse,
    dependencies=[Depends(_known_job)],
)
async def run_live(
    job_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> AsyncIterator[ServerSentEvent]:
    """Server-sent HTML: the progress panel on each change (with the run's header, out of
    band, so the two always agree); after the final state, the stream ends cleanly."""
    env = state.env
    token_needed = state.settings.SUBMIT_TOKEN is not None

    def panel() -> str:
        ctx = run_context(_job_json(job_id, dispatcher), _public_base(state, request))
        return env.get_template("_run_progress.html").render(
            **ctx, oob=True, token_needed=token_needed
        )

    with dispatcher.hub.subscribe(job_id) as queue:
        yield ServerSentEvent(raw_data=panel())
        while True:
            job = dispatcher.store.get_job(job_id)
            if job is None or job.status in FINAL_STATUSES:
                break
            try:
                notice = await asyncio.wait_for(queue.get(), timeout=15)
            except TimeoutError:
                yield ServerSentEvent(comment="keep-alive")
                continue
            yield ServerSentEvent(raw_data=panel())
            if notice.final:
                break
        # The final panel loads the result; the response then ends, and the page's script
        # declines to reconnect to a finished run (no aborted request in the console).
        yield ServerSentEvent(raw_data=panel())


def _history_row(job: dict[str, Any]) -> dict[str, Any]:
    shape, dtype = shape_and_dtype(job)
    return {**job, "shape": shape, "dtype": dtype, "variant": variant_of(job)}


@page_route("/runs")
async def runs_page(
    state: StateDep,
    dispatcher: DispatcherDep,
    *,
    workload: Annotated[str | None, Query(max_length=64)] = None,
    path: Annotated[str | None, Query(max_length=16)] = None,
    status: Annotated[str | None, Query(max_length=16)] = None,
) -> HTMLResponse:
    """Job history, newest first, filtered by workload, path and status."""
    filters = {
        "workload": workload if workload in WORKLOADS else None,
        "path": path if path in {p.value for p in PathId} else None,
        "status": status if status in {s.value for s in JobStatus} else None,
    }
    jobs, count = dispatcher.store.list_jobs(**filters, limit=200)
    ctx = {
        "jobs": [_history_row(job_public(j, dispatcher)) for j in jobs],
        "count": count,
        "filters": filters,
        "workloads": list(WORKLOADS),
        "paths": [p.value for p in PathId],
        "statuses": [s.value for s in JobStatus],
        "nav": "runs",
    }
    return render(state, "runs.html", ctx)


@page_route("/workers")
async def workers_page(state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """Connected workers: capabilities, last heartbeat, current job."""
    workers = [
        {
            "id": w.id,
            "name": w.name,
            "caps": w.capabilities,
            "seen_s": w.age_s,
            "job": w.current_job,
        }
        for w in dispatcher.connected_workers()
    ]
    return render(state, "workers.html", {"workers": workers, "nav": "workers"})
