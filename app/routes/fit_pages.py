"""Fit searches in the browser: the form (from the catalog's run form or an upload's
page), the list, and a search's page, which reloads its own live part (htmx every 2 s,
or a meta refresh without JavaScript) until every target has its answer. `.json` and
`.csv` are built from the same context as the page."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from pydantic import ValidationError
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, StateDep
from app.dispatch import Dispatcher
from app.pages.fits import artifact_dimensions, fit_csv, fit_view, load_fit
from app.queue.fit_spec import FitSpec, integer_parameters
from app.queue.fits import FitSearches
from app.queue.submission import read_capped_body
from app.routes.common import is_htmx, render
from app.routes.forms import FormValueError, number, typed_value, whole_number
from app.web.bodylimit import PAGE_FORM_BYTES
from app.web.problems import pydantic_problems
from workers.catalog import WORKLOADS
from workers.protocol import TARGET_IDS, target_groups

router = APIRouter(include_in_schema=False)

FIELDS = ("workload", "artifact", "params", "dimension", "lo", "hi", "step", "usable_fraction")
_ASSIGNMENTS = re.compile(r"[,\s]+")


def _public_or_404(fit_id: str, dispatcher: Dispatcher) -> dict[str, Any]:
    found = load_fit(fit_id, dispatcher)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no fit search {fit_id[:64]!r}")
    return found


def _params(text: str) -> dict[str, Any]:
    """`key=value` pairs (`dims.NAME=value` for a symbolic dimension) as parameters."""
    out: dict[str, Any] = {}
    for item in _ASSIGNMENTS.split(text.strip()):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise FormValueError(f"{item[:30]!r} is not key=value")
        value = typed_value(f"params: {key[:30]}", raw)
        if key.startswith("dims."):
            out.setdefault("dims", {})[key.removeprefix("dims.")] = value
        else:
            out[key] = value
    return out


def read_fit_form(
    form: dict[str, str], targets: list[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The FitSpec body from the form's fields, and errors naming each bad field."""
    errors: dict[str, str] = {}
    body: dict[str, Any] = {"dimension": form.get("dimension", "").strip(), "targets": targets}
    for name in ("workload", "artifact"):
        if form.get(name, "").strip():
            body[name] = form[name].strip()
    if not targets:
        errors["targets"] = "tick at least one target"
    readers: dict[str, Any] = {
        "params": _params,
        "lo": lambda raw: whole_number("from", raw, low=0),
        "hi": lambda raw: whole_number("to", raw, low=0),
        "step": lambda raw: whole_number("step", raw, low=1),
        "usable_fraction": lambda raw: number("usable fraction", raw) if raw.strip() else None,
    }
    read: dict[str, Any] = {}
    for name, reader in readers.items():
        try:
            read[name] = reader(form.get(name, ""))
        except FormValueError as exc:
            errors[name] = str(exc)
    if not errors:
        body.update(params=read["params"], range=[read["lo"], read["hi"]], step=read["step"])
        if read["usable_fraction"] is not None:
            body["usable_fraction"] = read["usable_fraction"]
    return body, errors


def _form_context(
    state: StateDep, dispatcher: Dispatcher, values: dict[str, Any], errors: dict[str, str]
) -> dict[str, Any]:
    artifact = values.get("artifact")
    if artifact:
        dimensions = artifact_dimensions(dispatcher.store, artifact) or []
    else:
        dimensions = integer_parameters(values.get("workload") or "")
    return {
        "values": values,
        "errors": errors,
        "dimensions": dimensions,
        "workloads": [(w, cls.title) for w, cls in WORKLOADS.items() if w != "exported"],
        "all_targets": list(TARGET_IDS),
        "target_groups": target_groups(),
        "token_needed": state.settings.SUBMIT_TOKEN is not None,
        "nav": "fits",
    }


@router.api_route("/fits/new", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def new_fit(
    state: StateDep,
    dispatcher: DispatcherDep,
    *,
    workload: Annotated[str | None, Query(max_length=64)] = None,
    artifact: Annotated[str | None, Query(max_length=64, pattern=r"^[0-9a-f]{64}$")] = None,
    dimension: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """The form, for a catalog workload (`?workload=`) or an upload (`?artifact=`)."""
    values: dict[str, Any] = {"targets": ["v6e:1x1", "h100:1", "b200:1"], "lo": "1"}
    if artifact:
        values["artifact"] = artifact
        dims = artifact_dimensions(dispatcher.store, artifact) or []
        values["dimension"] = dimension or (dims[0] if dims else "")
        values["hi"] = "65536"
    else:
        chosen = workload if workload in WORKLOADS and workload != "exported" else "attention"
        integers = integer_parameters(chosen)
        values.update(workload=chosen, dimension=dimension or (integers[0] if integers else ""))
    return render(state, "fit_new.html", _form_context(state, dispatcher, values, {}))


@router.post("/fits", response_class=HTMLResponse)
async def submit_fit_form(
    request: Request, state: StateDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> Response:
    """Start a search from the form; on a mistake, the form again with every value kept."""
    raw = await read_capped_body(request, PAGE_FORM_BYTES, "form")
    pairs = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
    form = {k: v[:2000] for k, v in pairs if k in (*FIELDS, "token")}
    targets = [v for k, v in pairs if k == "targets"]
    body, errors = read_fit_form(form, targets)
    try:
        admission.check_token(form.get("token"), "fit search", bearer=False)
    except HTTPException:
        errors["token"] = "this server needs its submission token"
    status, retry_after, fit_id = 422, None, None
    if not errors:
        try:
            spec = FitSpec.model_validate(body)
            fit_id = FitSearches(admission).submit(spec, admission.client(request))
        except ValidationError as exc:
            errors.update({f or "general": m for f, m in pydantic_problems(exc)})
        except HTTPException as exc:
            status = exc.status_code
            retry_after = (exc.headers or {}).get("Retry-After")
            detail = exc.detail if isinstance(exc.detail, list) else [{"message": exc.detail}]
            errors.update({str(d.get("field") or "general"): str(d["message"]) for d in detail})
    if fit_id is not None:
        return RedirectResponse(f"/fits/{fit_id}", status_code=303)
    values = {**form, "targets": targets}
    ctx = _form_context(state, dispatcher, values, errors)
    response = render(state, "fit_new.html", ctx, 401 if "token" in errors else status)
    if status == 429 and retry_after:
        response.headers["Retry-After"] = retry_after
    return response


@router.api_route("/fits", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def fits_page(state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """Fit searches, newest first."""
    return render(state, "fits.html", {"fits": dispatcher.store.list_fits(100), "nav": "fits"})


@router.api_route("/fits/{fit_id}.json", methods=["GET", "HEAD"])
async def fit_json(fit_id: str, dispatcher: DispatcherDep) -> JSONResponse:
    return JSONResponse(_public_or_404(fit_id, dispatcher))


@router.api_route("/fits/{fit_id}.csv", methods=["GET", "HEAD"])
async def fit_csv_route(fit_id: str, dispatcher: DispatcherDep) -> PlainTextResponse:
    return PlainTextResponse(
        fit_csv(_public_or_404(fit_id, dispatcher)),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="fit-{fit_id[:64]}.csv"'},
    )


@router.api_route("/fits/{fit_id}", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def fit_page(
    fit_id: str, request: Request, state: StateDep, dispatcher: DispatcherDep
) -> HTMLResponse:
    """The table, the chart and the probes; the live part reloads while the search runs."""
    ctx = {
        **fit_view(_public_or_404(fit_id, dispatcher)),
        "token_needed": state.settings.SUBMIT_TOKEN is not None,
        "nav": "fits",
    }
    return render(state, "_fit_live.html" if is_htmx(request) else "fit.html", ctx)


@router.post("/fits/{fit_id}/cancel", response_class=HTMLResponse)
async def cancel_fit_form(
    fit_id: str,
    request: Request,
    state: StateDep,
    dispatcher: DispatcherDep,
    admission: AdmissionDep,
) -> Response:
    """Cancel from the page's button (with the token the server needs, if any)."""
    raw = await read_capped_body(request, PAGE_FORM_BYTES, "form")
    form = dict(parse_qsl(raw.decode("utf-8", "replace")))
    admission.check_token(form.get("token"), "cancelling a fit search", bearer=False)
    current = _public_or_404(fit_id, dispatcher)
    FitSearches(admission).cancel(current["id"])  # False when it had ended: the page says so
    return RedirectResponse(f"/fits/{current['id']}", status_code=303)
