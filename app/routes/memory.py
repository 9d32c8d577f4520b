"""A run's memory report: `GET /api/v1/runs/{id}/memory` (JSON) and `/runs/{id}/memory`
(the page, its htmx fragment, and `/runs/{id}/memory.json`), all from the same report
(`app.pages.runs.memory`). `{id}` is the job id, as in `/runs/{id}`. A run without a
report answers 404 saying why."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from app.deps import DispatcherDep, StateDep
from app.dispatch import Dispatcher
from app.pages.jobs import PREFIX, job_public
from app.pages.runs.memory import memory_json, memory_view, no_report_reason
from app.routes.common import is_htmx, render
from app.routes.routing import reads
from app.routes.schemas import MessagePublic
from workers.protocol import MemoryReport, RunResult

api_router = APIRouter(prefix=PREFIX, tags=["runs"])
page_router = APIRouter(include_in_schema=False)


Reported = tuple[dict[str, Any], RunResult, MemoryReport]


def _reported(job_id: str, dispatcher: Dispatcher) -> Reported:
    """The job, its run and its published memory report; 404 saying why there is none."""
    job = dispatcher.store.get_job(job_id) if len(job_id) <= 64 else None
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
    public = job_public(job, dispatcher)
    found = public.get("run")
    run = RunResult.model_validate(found) if found else None
    report = run.memory_report if run is not None else None
    if run is None or report is None or report.withheld:
        raise HTTPException(status_code=404, detail=no_report_reason(public))
    return public, run, report


@reads(api_router)(
    "/runs/{job_id}/memory",
    responses={404: {"model": MessagePublic, "description": "No such run, or no report (why)."}},
    summary="A run's memory report",
)
async def get_memory(job_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The compiler's buffer assignment for one device of the run: the peak and the step it
    is reached at, the live-bytes curve, what is live at the peak by kind, padding and
    unattributed bytes, memory_analysis()'s figure with the rule it is compared by, and
    the buffers (biggest first, at most 200, the rest counted in `other`)."""
    _, run, report = _reported(job_id, dispatcher)
    return JSONResponse(memory_json(job_id, run, report))


@reads(page_router)("/runs/{job_id}/memory.json")
async def memory_page_json(job_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The memory page's JSON twin: the API's answer."""
    _, run, report = _reported(job_id, dispatcher)
    return JSONResponse(memory_json(job_id, run, report))


@reads(page_router)("/runs/{job_id}/memory", response_class=HTMLResponse)
async def memory_page(
    job_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> HTMLResponse:
    """Every listed buffer of the run's memory report, with its curve and the peak's make-up;
    the section alone for htmx."""
    job, run, _ = _reported(job_id, dispatcher)
    view = memory_view(job_id, run, rows=None, chart_prefix="memory-page")
    ctx = {"job": job, "run": run, "memory": view, "full_page": True, "nav": "runs"}
    return render(state, "_run_memory.html" if is_htmx(request) else "run_memory.html", ctx)
