"""Workload matrices: submit one (API or form), follow it as a live table, download it.

`POST /api/v1/matrices` expands a workload over row values and paths into jobs, each
validated like a job submitted alone; cells that cannot run keep their reason. The page
`/matrices/{id}` polls its own table (htmx, every second) until every cell is final;
`.json` and `.csv` are built from the same context.
"""

from __future__ import annotations

import re
import secrets
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from pydantic import ValidationError
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, SettingsDep, StateDep
from app.dispatch import Dispatcher
from app.pages.matrices import cell_view, example_rows, matrix_csv, matrix_public
from app.queue.admission import Admission
from app.queue.matrices import HOST, SHAPE, MatrixSpec, expand
from app.queue.submission import field_errors, read_capped_body, read_json_body
from app.routes.common import connected_paths, is_htmx, render
from app.routes.forms import FormValueError, sample_count, typed_value
from app.routes.request_schemas import matrix_request_schema
from app.routes.routing import reads
from app.routes.schemas import SUBMIT_ERRORS, MessagePublic, refusing
from app.settings import Settings
from app.store.matrices import CellRow, MatrixRow
from app.web.problems import pydantic_problems
from workers.catalog import WORKLOADS
from workers.protocol import TARGET_IDS, CachePolicy, Mode, PathId, target_groups

router = APIRouter(tags=["matrices"])

read_route = reads(router)

FORM_FIELDS = frozenset(
    {"title", "axis.name", "axis.values", "base_params", "columns.name", "columns.values"}
    | {"mode", "samples", "cache"}
)
"""The matrix form's text fields, kept when the form is asked for again."""


ERRORS = refusing(
    SUBMIT_ERRORS,
    "each cell as a job (POST /api/v1/jobs): an axis's values as the parameter it names, "
    "against the workload, path and target of the cell",
)


def create_matrix(spec: MatrixSpec, admission: Admission, settings: Settings, client: str) -> str:
    """Expand `spec`, queue every cell that can run, store the matrix; its id.

    422 when no cell can run at all (each reason is listed), 429 when admission refuses
    the runnable cells (each counts as a job): a matrix is queued whole or not at all.
    """
    dispatcher = admission.dispatcher
    cells = expand(spec, dispatcher.store, settings.MAX_JOB_BYTES)
    valid = [c.valid for c in cells if c.valid is not None]
    if not valid:
        reasons = list(dict.fromkeys(c.reason or "" for c in cells))
        field_errors([(None, f"no cell can run: {reason}") for reason in reasons])
    jobs = iter(admission.queue(client, valid))
    stored = [
        CellRow(cell.row, cell.col, next(jobs).id if cell.valid is not None else None, cell.reason)
        for cell in cells
    ]
    matrix_id = secrets.token_hex(8)
    dispatcher.store.insert_matrix(matrix_id, spec.model_dump(mode="json"), stored)
    return matrix_id


def _matrix_or_404(matrix_id: str, dispatcher: Dispatcher) -> MatrixRow:
    found = dispatcher.store.get_matrix(matrix_id) if len(matrix_id) <= 64 else None
    if found is None:
        raise HTTPException(status_code=404, detail=f"no matrix {matrix_id[:64]!r}")
    return found


# --- API --------------------------------------------------------------------------------


@router.post(
    "/api/v1/matrices",
    status_code=201,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": matrix_request_schema(MatrixSpec)}},
        }
    },
    summary="Submit a workload matrix",
)
async def submit_matrix(
    request: Request, settings: SettingsDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> JSONResponse:
    """Run a workload over row values (a parameter, or whole shapes) × paths, as jobs."""
    admission.check_bearer(request, "matrix submission")
    client = admission.client(request)
    data = await read_json_body(request, settings.MAX_BODY_BYTES)
    if not isinstance(data, dict):
        field_errors([("body", "expected a JSON object")])
    try:
        spec = MatrixSpec.model_validate(data)
    except ValidationError as exc:
        field_errors(pydantic_problems(exc))
    matrix_id = create_matrix(spec, admission, settings, client)
    body = matrix_public(_matrix_or_404(matrix_id, dispatcher), dispatcher)
    return JSONResponse(body, status_code=201, headers={"Location": body["links"]["self"]})


@read_route("/api/v1/matrices", summary="List matrices")
async def list_matrices(
    dispatcher: DispatcherDep, limit: Annotated[int, Query(ge=1, le=200)] = 50
) -> JSONResponse:
    """Matrices, newest first (without their cells)."""
    data = [
        {
            "id": m.id,
            "workload": m.spec["workload"],
            "title": m.spec.get("title"),
            "links": {"self": f"/api/v1/matrices/{m.id}", "page": f"/matrices/{m.id}"},
        }
        for m in dispatcher.store.list_matrices(limit)
    ]
    return JSONResponse({"data": data, "count": len(data)})


@read_route(
    "/api/v1/matrices/{matrix_id}",
    responses={404: {"model": MessagePublic}},
    summary="Get a matrix and its cells",
)
async def get_matrix(matrix_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    """Every cell: its job's status (or why it has none) and, once run, what it measured."""
    return JSONResponse(matrix_public(_matrix_or_404(matrix_id, dispatcher), dispatcher))


# --- pages ------------------------------------------------------------------------------

_SPLIT_SCALARS = re.compile(r"[,;\n]+")
_SPLIT_SHAPES = re.compile(r"[;\n]+")
_SPLIT_ASSIGNMENTS = re.compile(r"[,\s]+")


def _assignments(text: str, field: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in _SPLIT_ASSIGNMENTS.split(text.strip()):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{field}: {item[:30]!r} is not key=value")
        out[key] = typed_value(f"{field}: {key[:30]}", value)
    return out


def _values(name: str, text: str, field: str) -> list[Any]:
    if name == SHAPE:
        return [_assignments(item, field) for item in _SPLIT_SHAPES.split(text) if item.strip()]
    return [typed_value(field, item) for item in _SPLIT_SCALARS.split(text) if item.strip()]


def read_matrix_form(
    form: dict[str, str], paths: list[str], targets: list[str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The MatrixSpec body from the form's text fields, and errors naming each bad field."""
    errors: dict[str, str] = {}
    body: dict[str, Any] = {"workload": form.get("workload", ""), "paths": paths}
    if targets:
        body["targets"] = targets
    elif not paths:
        errors["paths"] = "tick at least 1 item: a path, or a target below"
    try:
        body["base_params"] = _assignments(form.get("base_params", ""), "base_params")
    except ValueError as exc:
        errors["base_params"] = str(exc)
    for part in ("axis", "columns"):  # the rows' parameter, and the columns' (optional)
        name = form.get(f"{part}.name", "").strip()
        if part == "columns" and not name:
            continue
        try:
            values = _values(name, form.get(f"{part}.values", ""), f"{part}.values")
        except ValueError as exc:
            errors[f"{part}.values"] = str(exc)
            continue
        body[part] = {"name": name, "values": values}
    body["measure"] = {
        "mode": form.get("mode", Mode.LATENCY.value),
        "cache": form.get("cache", CachePolicy.COLD.value),
    }
    try:
        body["measure"]["samples"] = sample_count(form.get("samples", "20"))
    except FormValueError as exc:
        errors["measure.samples"] = str(exc)
    if form.get("title", "").strip():
        body["title"] = form["title"].strip()
    return body, errors


def _form_context(
    state: StateDep, dispatcher: Dispatcher, values: dict[str, Any], errors: dict[str, str]
) -> dict[str, Any]:
    return {
        "values": values,
        "errors": errors,
        "workloads": [(w.workload, w.title) for w in WORKLOADS.values()],
        "all_paths": [p.value for p in PathId],
        "all_targets": [HOST, *TARGET_IDS],
        "target_groups": target_groups(),
        "connected": connected_paths(dispatcher),
        "modes": [m.value for m in Mode],
        "caches": [c.value for c in CachePolicy],
        "token_needed": state.settings.SUBMIT_TOKEN is not None,
        "nav": "matrices",
    }


@router.api_route(
    "/matrices/new", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False
)
async def new_matrix(
    request: Request,
    state: StateDep,
    dispatcher: DispatcherDep,
    *,
    workload: Annotated[str, Query(max_length=64)] = "matmul",
    artifact: Annotated[str | None, Query(max_length=64)] = None,
    shown: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """The matrix form; `?workload=exported&artifact=SHA` starts from an uploaded function.

    Choosing another workload asks for the form again (htmx, or a plain GET without
    JavaScript) with what was typed; `shown` names the workload it showed, and rows that
    belonged to it give way to the new workload's example rows."""
    chosen = workload if workload in WORKLOADS else "matmul"
    values: dict[str, Any] = {"workload": chosen, "paths": ["jax-cpu"]}
    if shown is not None:  # the form itself asked: keep what was typed
        query = request.query_params
        values.update({k: v[:2000] for k, v in query.items() if k in FORM_FIELDS})
        values["paths"] = query.getlist("paths")
        values["targets"] = query.getlist("targets")
    if artifact:
        values.update({"workload": "exported", "axis.name": "artifact", "axis.values": artifact})
    elif shown != chosen:
        name, rows = example_rows(chosen)
        values.update({"axis.name": name, "axis.values": rows, "base_params": ""})
    ctx = _form_context(state, dispatcher, values, {})
    return render(state, "_matrix_form.html" if is_htmx(request) else "matrix_new.html", ctx)


@router.post("/matrices", response_class=HTMLResponse, include_in_schema=False)
async def submit_matrix_form(
    request: Request, state: StateDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> Response:
    """Create a matrix from the form; on a mistake, the form again with every value kept."""
    raw = await read_capped_body(request, state.settings.MAX_BODY_BYTES, "form")
    pairs = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
    form = {k: v for k, v in pairs if k not in ("paths", "targets")}
    paths = [v for k, v in pairs if k == "paths"]
    targets = [v for k, v in pairs if k == "targets"]
    body, errors = read_matrix_form(form, paths, targets)
    settings = state.settings
    try:
        admission.check_token(form.get("token"), "matrix submission", bearer=False)
    except HTTPException:
        errors["token"] = "this server needs its submission token"
    matrix_id = None
    status = 422
    retry_after: str | None = None
    if not errors:
        try:
            spec = MatrixSpec.model_validate(body)
            matrix_id = create_matrix(spec, admission, settings, admission.client(request))
        except ValidationError as exc:
            errors.update({f or "general": m for f, m in pydantic_problems(exc)})
        except HTTPException as exc:
            status = exc.status_code
            retry_after = (exc.headers or {}).get("Retry-After")
            detail: list[dict[str, Any]] = (
                exc.detail
                if isinstance(exc.detail, list)
                else [{"field": None, "message": str(exc.detail)}]
            )
            for d in detail:
                key = str(d.get("field") or "general")
                errors[key] = f"{errors[key]} {d['message']}" if key in errors else d["message"]
    if matrix_id is None:
        values = {**form, "paths": paths, "targets": targets}
        status = 401 if "token" in errors else status
        ctx = _form_context(state, dispatcher, values, errors)
        response = render(state, "matrix_new.html", ctx, status)
        if status == 429 and retry_after:
            response.headers["Retry-After"] = retry_after
        return response
    return RedirectResponse(f"/matrices/{matrix_id}", status_code=303)


@router.api_route(
    "/matrices", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False
)
async def matrices_page(state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """Matrices, newest first."""
    matrices = dispatcher.store.list_matrices(100)
    return render(state, "matrices.html", {"matrices": matrices, "nav": "matrices"})


@router.api_route("/matrices/{matrix_id}.json", methods=["GET", "HEAD"], include_in_schema=False)
async def matrix_json(matrix_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    return JSONResponse(matrix_public(_matrix_or_404(matrix_id, dispatcher), dispatcher))


@router.api_route("/matrices/{matrix_id}.csv", methods=["GET", "HEAD"], include_in_schema=False)
async def matrix_csv_route(matrix_id: str, dispatcher: DispatcherDep) -> PlainTextResponse:
    public = matrix_public(_matrix_or_404(matrix_id, dispatcher), dispatcher)
    return PlainTextResponse(
        matrix_csv(public),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="matrix-{matrix_id}.csv"'},
    )


@router.api_route(
    "/matrices/{matrix_id}",
    methods=["GET", "HEAD"],
    response_class=HTMLResponse,
    include_in_schema=False,
)
async def matrix_page(
    matrix_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> HTMLResponse:
    """The table; while a cell is unfinished, its fragment reloads itself every second."""
    public = matrix_public(_matrix_or_404(matrix_id, dispatcher), dispatcher)
    ctx = {
        "m": public,
        "rows": [{**r, "cells": [cell_view(c) for c in r["cells"]]} for r in public["rows"]],
        "nav": "matrices",
    }
    return render(state, "_matrix_table.html" if is_htmx(request) else "matrix.html", ctx)
