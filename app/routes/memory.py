"""A run's memory report: `GET /api/v1/runs/{id}/memory` (JSON) and `/runs/{id}/memory`
(the page, its htmx fragment, and `/runs/{id}/memory.json`), all from the same report
(`app.pages.runs.memory`). `{id}` is the job id, as in `/runs/{id}`. A run without a
report answers 404 saying why."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from app.deps import DispatcherDep, StateDep
from app.dispatch import Dispatcher
from app.pages.jobs import PREFIX
from app.pages.runs.memory import Reported, memory_json, memory_view, no_report_reason
from app.routes.common import is_htmx, render
from app.routes.routing import reads
from app.routes.schemas import MessagePublic
from app.store import JobRow
from workers.protocol import JobStatus

api_router = APIRouter(prefix=PREFIX, tags=["runs"])
page_router = APIRouter(include_in_schema=False)


def _reported(job_id: str, dispatcher: Dispatcher) -> tuple[JobRow, Reported]:
    """The job and its published memory report; 404 saying why there is none. Only the
    report and a few facts of the run are read (`Reported`), not the whole run."""
    job = dispatcher.store.get_job(job_id) if len(job_id) <= 64 else None
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
    found = dispatcher.store.get_run(job.id) if job.status == JobStatus.DONE else None
    run: dict[str, Any] | None = json.loads(found.result) if found is not None else None
    reported = Reported.from_json(job.id, run) if run is not None else None
    if reported is None or reported.report.withheld:
        public = {"id": job.id, "status": job.status.value, "path": job.path, "run": run}
        raise HTTPException(status_code=404, detail=no_report_reason(public))
    return job, reported


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
    _, reported = _reported(job_id, dispatcher)
    return JSONResponse(memory_json(reported))


@reads(page_router)("/runs/{job_id}/memory.json")
async def memory_page_json(job_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The memory page's JSON twin: the API's answer."""
    _, reported = _reported(job_id, dispatcher)
    return JSONResponse(memory_json(reported))


@reads(page_router)("/runs/{job_id}/memory", response_class=HTMLResponse)
async def memory_page(
    job_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> HTMLResponse:
    """Every listed buffer of the run's memory report, with its curve and the peak's make-up;
    the section alone for htmx."""
    job, reported = _reported(job_id, dispatcher)
    view = memory_view(reported, rows=None, chart_prefix="memory-page")
    target = {"id": reported.target} if reported.target else None
    page_job = {"id": job.id, "workload": job.workload, "path": job.path, "target": reported.target}
    ctx = {
        "job": page_job,
        "run": {"target": target},
        "memory": view,
        "full_page": True,
        "nav": "runs",
    }
    return render(state, "_run_memory.html" if is_htmx(request) else "run_memory.html", ctx)
