"""The run form: `/runs/new` (page, or the fragment under a reader card) built from the
catalog and starting on what a connected worker can do, and `POST /runs`, which queues
the job through the one admission and lands on the run's own page."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, StateDep
from app.dispatch import Dispatcher
from app.pages.compiler_options import options_context
from app.pages.runs.form import FormState, choose_path, measure_fields, param_fields
from app.pages.runs.target_options import target_note, target_options, wider_targets_note
from app.queue.submission import form_errors, read_capped_body, validate_submission
from app.routes.common import connected_paths, is_htmx, render
from app.routes.forms import FormValueError, number, sample_count, whole_number
from app.routes.routing import reads
from app.state import AppState
from app.web.bodylimit import PAGE_FORM_BYTES
from workers.catalog import WORKLOADS
from workers.catalog.kernels import PALLAS, PALLAS_FIELDS
from workers.protocol import PathId, StageId, TargetError, parse_target
from workers.protocol.compiler_options import (
    PATH_COMPILER,
    OptionError,
    allowed_table,
    check_options,
    compiler_for,
)

router = APIRouter(include_in_schema=False)
"""Included before the run pages' router, so `/runs/new` is never read as a run id."""

FORM_MAX_BYTES = PAGE_FORM_BYTES  # (app.web.bodylimit)


def read_form(form: dict[str, str], stages: list[str]) -> tuple[dict[str, Any], FormState]:
    """The job body from form fields, or errors naming each bad field."""
    workload = form.get("workload", "")
    state = FormState(workload=workload, path=form.get("path", PathId.JAX_CPU.value))
    state.target = form.get("target", "").strip()[:16] or None
    state.values = {k: v for k, v in form.items() if k not in ("workload", "path", "target")}
    state.stages = stages
    if workload not in WORKLOADS:
        state.errors["workload"] = f"unknown workload (known: {', '.join(sorted(WORKLOADS))})"
        return {}, state
    params: dict[str, Any] = {}
    pallas = form.get("param.kernel", "").strip() == PALLAS
    for f in param_fields(workload, state.path):  # what the path reads, and nothing else
        raw = form.get(f"param.{f.name}")
        if f.name in PALLAS_FIELDS and (not pallas or (raw or "").strip() in ("", "0")):
            continue  # a Pallas kernel's settings, sent only for one (0 or empty: its default)
        if f.kind == "checkbox":
            params[f.name] = raw is not None
            continue
        if raw is None:
            continue  # not on the form: the workload's default applies
        if raw.strip() == "":
            if f.default not in (None, ""):
                # An emptied box is not a request for the default: say which it would be.
                state.errors[f"params.{f.name}"] = (
                    f"{f.name} is required; the default is {f.default}"
                )
            continue
        if f.name == "kernel" and raw.strip() not in f.options:
            continue  # another path's kernel, left over when the path changed: its default
        try:
            if f.kind == "integer":
                params[f.name] = whole_number(f.name, raw)
            elif f.kind == "number":
                params[f.name] = number(f.name, raw)
            else:
                params[f.name] = raw.strip()
        except FormValueError as exc:
            state.errors[f"params.{f.name}"] = str(exc)
    measure: dict[str, Any] = {}
    for key in ("mode", "cache"):
        if form.get(f"measure.{key}"):
            measure[key] = form[f"measure.{key}"]
    samples = form.get("measure.samples", "").strip()
    if samples:
        try:
            measure["samples"] = sample_count(samples)
        except FormValueError as exc:
            state.errors["measure.samples"] = str(exc)
    body = {
        "workload": workload,
        "path": state.path,
        "params": params,
        "stages": [s.value for s in StageId if s.value in stages],
        "measure": measure,
    }
    if state.target:
        body["target"] = state.target
    lines = [
        line
        for line in form.get("compiler_options", "").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    if lines:
        try:
            body["compiler_options"] = check_options(lines, compiler_for(state.path))
        except OptionError as exc:
            state.errors["compiler_options"] = exc.message
    if not body["stages"]:
        state.errors["stages"] = "choose at least one stage"
    return body, state


def _form_context(
    state: AppState, dispatcher: Dispatcher, form: FormState, note: str | None = None
) -> dict[str, Any]:
    workload = WORKLOADS[form.workload]
    connected = connected_paths(dispatcher)
    workers = [w.capabilities for w in dispatcher.recent_workers()]
    options = target_options(form.workload, form.path, workers)
    chosen = next((o for o in options if o.id == form.target), None)
    compiler = PATH_COMPILER.get(form.path)
    return {
        "compiler": compiler,
        "allowed_options": allowed_table(compiler) if compiler is not None else [],
        "targets": options,
        "wider_targets": wider_targets_note(form.workload, form.path, options),
        "target_note": target_note(chosen.id, chosen.real) if chosen else None,
        "form": form,
        "workloads": [(w.workload, w.title) for w in WORKLOADS.values()],
        "workload": workload,
        "params": param_fields(form.workload, form.path),
        "measure": measure_fields(),
        "paths": [p.value for p in workload.paths],
        "connected": connected,
        # As /workers lists them: cuda without a GPU that runs it is for compiling only.
        "offered": [
            f"{p} (compile only)"
            if p == PathId.CUDA.value
            and not any(w.capabilities.cuda_run for w in dispatcher.recent_workers())
            else p
            for p in connected
        ],
        "path_note": note,
        "token_needed": state.settings.SUBMIT_TOKEN is not None,
        "nav": "runs",
    }


@reads(router)("/runs/new", response_class=HTMLResponse)
async def new_run(
    request: Request,
    state: StateDep,
    dispatcher: DispatcherDep,
    *,
    workload: Annotated[str, Query(max_length=64)] = "matmul",
    path: Annotated[str | None, Query(max_length=16)] = None,
    shown: Annotated[str | None, Query(max_length=64)] = None,
    shown_path: Annotated[str | None, Query(max_length=16)] = None,
    target: Annotated[str | None, Query(max_length=16)] = None,
    shown_target: Annotated[str | None, Query(max_length=16)] = None,
) -> HTMLResponse:
    """The run form, generated from the catalog, starting on what a connected worker can do.

    The form asks for itself again (htmx, or a plain GET without JavaScript) when the
    workload or path changes: `shown` and `shown_path` say what it showed, so the values
    typed so far are kept where they still apply.
    """
    if workload not in WORKLOADS:
        workload = "matmul"
    if path is None and target is not None:  # a target names its path
        with contextlib.suppress(TargetError):
            path = parse_target(target).path.value
    workers = [w.capabilities for w in dispatcher.recent_workers()]
    picked = shown_path is not None  # the user chose this path in the form itself
    choice = choose_path(workload, path, workers, state.settings.QUEUE_TIMEOUT_S, insist=picked)
    form = FormState(workload=workload, path=choice.path, stages=choice.stages)
    for key, value in request.query_params.multi_items():
        if key.startswith("measure.") or (key.startswith("param.") and shown == workload):
            form.values[key] = value[:200]
        elif key == "compiler_options":
            form.values[key] = value[:4000]
    if shown == workload and shown_path == choice.path:
        form.stages = request.query_params.getlist("stages")  # nothing changed them
    # A target goes with some paths only (jax-cpu takes none): another path clears it.
    offered = {o.id for o in target_options(workload, choice.path, workers)}
    form.target = target if target in offered else None
    if target is None and choice.target in offered:
        form.target = choice.target  # none asked for: start on one a worker compiles for
    if form.target and form.target != shown_target:
        form.stages = [StageId.COMPILE.value]  # a new target: compile only, and say why
    elif shown_target and not form.target:
        form.stages = choice.stages  # the target was cleared: the path's usual stages
    ctx = _form_context(state, dispatcher, form, choice.note)
    return render(state, "_run_form.html" if is_htmx(request) else "run_new.html", ctx)


@reads(router)("/compiler-options", response_class=HTMLResponse)
async def compiler_options_page(state: StateDep) -> HTMLResponse:
    """The options each compiler takes, and worked examples of what one option changes."""
    return render(state, "compiler_options.html", {**options_context(), "nav": "runs"})


@reads(router)("/compiler-options.json")
async def compiler_options_json() -> dict[str, Any]:
    """The same as JSON."""
    return options_context()


@router.post("/runs", response_class=HTMLResponse)
async def submit_run(
    request: Request, state: StateDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> Response:
    """Queue a job from the form; on a mistake, show the form again with every value kept."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise HTTPException(status_code=415, detail="send the form as urlencoded fields")
    body_bytes = await read_capped_body(request, FORM_MAX_BYTES, "form")
    pairs = parse_qsl(body_bytes.decode("utf-8", "replace"), keep_blank_values=True)
    form = {k: v for k, v in pairs if k != "stages"}
    stages = [v for k, v in pairs if k == "stages"]
    body, form_state = read_form(form, stages)
    settings = state.settings

    def again(status: int) -> HTMLResponse:
        if form_state.workload not in WORKLOADS:
            form_state.workload = "matmul"
        ctx = _form_context(state, dispatcher, form_state)
        return render(state, "_run_form.html" if is_htmx(request) else "run_new.html", ctx, status)

    if form_state.errors and form_state.workload in WORKLOADS:
        # A field that is not even a number is left out of `body`; the others are still
        # checked now, so every field's problem shows at once, not one per attempt.
        try:
            validate_submission(body, dispatcher.store, settings.MAX_JOB_BYTES)
        except HTTPException as exc:
            for name, message in form_errors(exc).items():
                if name != "general":
                    form_state.errors.setdefault(name, message)
    if form_state.errors:
        return again(422)
    try:
        admission.check_token(form.get("token"), "job submission", bearer=False)
    except HTTPException:
        form_state.errors["token"] = "this server needs its submission token"
        return again(401)
    try:
        valid = validate_submission(body, dispatcher.store, settings.MAX_JOB_BYTES)
    except HTTPException as exc:
        problems = form_errors(exc)
        if "general" in problems:
            form_state.general.append(problems.pop("general"))
        form_state.errors.update(problems)
        return again(exc.status_code)
    try:
        (job,) = admission.queue(admission.client(request), [valid])
    except HTTPException as busy:
        form_state.general.append(f"Not queued: {busy.detail}.")
        response = again(busy.status_code)
        response.headers.update(busy.headers or {})
        return response
    url = f"/runs/{job.id}"
    if is_htmx(request):
        # A whole page: its own URL, title and heading, and Back returns to the form.
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)
