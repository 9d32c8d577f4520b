"""A run's memory report: `GET /api/v1/runs/{id}/memory` (JSON) and `/runs/{id}/memory`
(the page, its htmx fragment, and `/runs/{id}/memory.json`), all from the same report
(`app.pages.runs.memory`). `{id}` is the job id, as in `/runs/{id}`. Every job that exists
answers 200: a run without a report (CUDA C++, a compile the compiler refused, a job not
run yet) says why, with the compiler's peak where it gave one; only an unknown id is 404."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from app.deps import DispatcherDep, StateDep
from app.dispatch import Dispatcher
from app.pages.jobs import PREFIX
from app.pages.runs.memory import Reported, memory_json, memory_view, missing_json, missing_view
from app.routes.common import is_htmx, render
from app.routes.routing import reads
from app.routes.schemas import MessagePublic
from app.store import JobRow
from workers.protocol import JobStatus

api_router = APIRouter(prefix=PREFIX, tags=["runs"])
page_router = APIRouter(include_in_schema=False)


def _reported(job_id: str, dispatcher: Dispatcher) -> tuple[JobRow, Reported | dict[str, Any]]:
    """The job and its published memory report, or (none) `missing_json`'s answer saying
    why; 404 for no such job. Only the report and a few facts of the run are read
    (`Reported`), not the whole run."""
    job = dispatcher.store.get_job(job_id) if len(job_id) <= 64 else None
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
    found = dispatcher.store.get_run(job.id) if job.status == JobStatus.DONE else None
    run: dict[str, Any] | None = json.loads(found.result) if found is not None else None
    reported = Reported.from_json(job.id, run) if run is not None else None
    if reported is None:
        public = {"id": job.id, "status": job.status.value, "path": job.path, "run": run}
        return job, missing_json(public)
    return job, reported


def _answer(reported: Reported | dict[str, Any]) -> JSONResponse:
    return JSONResponse(memory_json(reported) if isinstance(reported, Reported) else reported)


@reads(api_router)(
    "/runs/{job_id}/memory",
    responses={404: {"model": MessagePublic, "description": "No such job."}},
    summary="A run's memory report",
)
async def get_memory(job_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The compiler's buffer assignment for one device of the run: the peak and the step it
    is read at, the live-bytes curve, what the buffers hold at the peak by kind, the blocks
    reserved whole and what sets their size, padding and unattributed bytes,
    memory_analysis()'s figure with the rule it is compared by, and the buffers (biggest
    first, at most 200, the rest counted in `other`). A run with no report answers with
    `reason` (why) and the compiler's `peak_bytes` where it gave one."""
    _, reported = _reported(job_id, dispatcher)
    return _answer(reported)


@reads(page_router)("/runs/{job_id}/memory.json")
async def memory_page_json(job_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The memory page's JSON twin: the API's answer."""
    _, reported = _reported(job_id, dispatcher)
    return _answer(reported)


@reads(page_router)("/runs/{job_id}/memory", response_class=HTMLResponse)
async def memory_page(
    job_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> HTMLResponse:
    """Every listed buffer of the run's memory report, with its curve and the peak's make-up
    (or why the run has none); the section alone for htmx."""
    job, reported = _reported(job_id, dispatcher)
    if isinstance(reported, Reported):
        view = memory_view(reported, rows=None, chart_prefix="memory-page")
        target_id = reported.target
    else:
        view, target_id = missing_view(reported), job.spec.get("target")
    target = {"id": target_id} if target_id else None
    page_job = {"id": job.id, "workload": job.workload, "path": job.path, "target": target_id}
    ctx = {
        "job": page_job,
        "run": {"target": target},
        "memory": view,
        "full_page": True,
        "nav": "runs",
    }
    return render(state, "_run_memory.html" if is_htmx(request) else "run_memory.html", ctx)
