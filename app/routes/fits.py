"""Fit searches over the API: submit one, follow it, list them, cancel one.

`POST /api/v1/fits` checks the search like a job (every problem named by its field),
queues its first probes through admission and answers 202 with its id; the server
queues each next probe as the previous ones end (app.queue.fits).
`GET /api/v1/fits/{id}` answers where each target stands and, once proved, its answer.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from app.deps import AdmissionDep, DispatcherDep, SettingsDep
from app.dispatch import Dispatcher
from app.pages.fits import fit_links, load_fit
from app.queue.fit_spec import FitSpec
from app.queue.fits import FitSearches
from app.queue.submission import field_errors, read_json_body
from app.routes.request_schemas import fit_request_schema
from app.routes.routing import reads
from app.routes.schemas import SUBMIT_ERRORS, MessagePublic, refusing
from app.web.problems import pydantic_problems

router = APIRouter(prefix="/api/v1", tags=["fits"])

read_route = reads(router)

FIT_ERRORS = refusing(
    SUBMIT_ERRORS,
    "one program (a workload or an artifact), the integer searched being one of its "
    "integer parameters or symbolic dimensions, its range a multiple of the step, each "
    "target one the program compiles for, and the artifact being stored",
)
FIT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": fit_request_schema(FitSpec)}},
    }
}


def fit_or_404(fit_id: str, dispatcher: Dispatcher) -> dict[str, Any]:
    found = load_fit(fit_id, dispatcher)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no fit search {fit_id[:64]!r}")
    return found


def read_fit_spec(data: Any) -> FitSpec:
    """`data` as a FitSpec, or 422 naming each field at fault."""
    if not isinstance(data, dict):
        field_errors([("body", "expected a JSON object")])
    try:
        return FitSpec.model_validate(data)
    except ValidationError as exc:
        field_errors(pydantic_problems(exc))


@router.post(
    "/fits",
    status_code=202,
    responses=FIT_ERRORS,
    openapi_extra=FIT_BODY,
    summary="Start a fit search",
)
async def submit_fit(
    request: Request, settings: SettingsDep, admission: AdmissionDep
) -> JSONResponse:
    """Find, per target, the largest value of one integer whose compile fits: each probe
    is a compile-only job for the target, counted by admission like a matrix's cells."""
    admission.check_bearer(request, "fit search")
    client = admission.client(request)
    spec = read_fit_spec(await read_json_body(request, settings.MAX_BODY_BYTES))
    fit_id = FitSearches(admission).submit(spec, client)
    links = fit_links(fit_id)
    return JSONResponse(
        {"id": fit_id, "status": "queued", "links": links},
        status_code=202,
        headers={"Location": links["self"]},
    )


@read_route("/fits", summary="List fit searches")
async def list_fits(
    dispatcher: DispatcherDep, limit: Annotated[int, Query(ge=1, le=200)] = 50
) -> JSONResponse:
    """Fit searches, newest first (without their probes)."""
    data = [
        {
            "id": f.id,
            "status": f.status,
            "dimension": f.spec.get("dimension"),
            "workload": f.spec.get("workload"),
            "artifact": f.spec.get("artifact"),
            "targets": f.spec.get("targets"),
            "links": fit_links(f.id),
        }
        for f in dispatcher.store.list_fits(limit)
    ]
    return JSONResponse({"data": data, "count": len(data)})


@read_route(
    "/fits/{fit_id}",
    responses={404: {"model": MessagePublic}},
    summary="Get a fit search and its answer per target",
)
async def get_fit(fit_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    """Each target: its criterion, the largest value that fits with the peak at it and at
    the next value (the proof), the bracket so far and every probe (`run_id` is the
    probe's job, as in /runs/{id})."""
    return JSONResponse(fit_or_404(fit_id, dispatcher))


@router.post(
    "/fits/{fit_id}/cancel",
    responses={404: {"model": MessagePublic}, 409: {"model": MessagePublic}},
    summary="Cancel a fit search",
)
async def cancel_fit(
    fit_id: str, request: Request, dispatcher: DispatcherDep, admission: AdmissionDep
) -> JSONResponse:
    """Stop planning probes, and cancel those still queued or compiling."""
    admission.check_bearer(request, "cancelling a fit search")
    current = fit_or_404(fit_id, dispatcher)
    if not FitSearches(admission).cancel(current["id"]):
        raise HTTPException(
            status_code=409, detail=f"the fit search has already ended ({current['status']})"
        )
    return JSONResponse(fit_or_404(fit_id, dispatcher))
