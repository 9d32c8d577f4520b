"""What the artifact routes share (`artifacts`, `artifact_form`, `artifact_targets`): where
uploads spool, the upload form's and an artifact page's context, and queueing the jobs a
page form asks for, or the page again saying what was wrong. No route is defined here."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse

from app.deps import AdmissionDep, StateDep
from app.dispatch import Dispatcher
from app.pages.artifact import artifact_context
from app.queue.submission import form_errors, read_capped_body, validate_submission
from app.queue.validation import ValidJob
from app.routes.common import connected_paths, render
from app.routes.forms import FormValueError, whole_number
from app.settings import Settings
from app.store import JobRow
from app.store.url import parse_db
from app.web.spool import spool_folder
from workers.catalog.exported import JAX_PLATFORM
from workers.protocol import CachePolicy, Mode


def spool_here(settings: Settings) -> Path:
    """Where uploads are spooled: beside a SQLite database, on the disk that keeps them;
    with PostgreSQL (no database file here), beside the compilation cache."""
    database = parse_db(settings.DB)
    local = Path(database.target).parent if database.kind == "sqlite" else None
    return spool_folder(local or Path(settings.CACHE_DIR).parent)


CLOSE = {"Connection": "close"}
"""On an answer given before the body was read whole: the rest is never read."""


def page_context(
    state: StateDep,
    dispatcher: Dispatcher,
    *,
    info: dict[str, Any] | None = None,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    ticked: list[str] | None = None,
) -> dict[str, Any]:
    """The upload form's, or an uploaded file's page's, context (`ticked`: the target boxes
    the person chose, as artifact_context takes them)."""
    paths: list[str] = []
    if info is not None and "header" in info:
        platforms = info["header"]["platforms"]
        paths = [p.value for p, name in JAX_PLATFORM.items() if name in platforms]
    return {
        **(artifact_context(info, dispatcher, ticked) if info is not None else {}),
        "info": info,
        "values": values or {},
        "errors": errors or {},
        "paths": paths,
        "connected": connected_paths(dispatcher),
        "modes": [m.value for m in Mode],
        "caches": [c.value for c in CachePolicy],
        "token_needed": state.settings.SUBMIT_TOKEN is not None,
        "max_bytes": state.settings.UPLOAD_MAX_BYTES,
        "nav": "artifacts",
    }


async def page_form(request: Request) -> list[tuple[str, str]]:
    """A form the artifact page posts, as its (name, value) pairs."""
    raw = (await read_capped_body(request, 64 * 1024)).decode("utf-8", "replace")
    return parse_qsl(raw, keep_blank_values=True)


def queue_or_page(
    request: Request,
    state: StateDep,
    dispatcher: Dispatcher,
    admission: AdmissionDep,
    *,
    info: dict[str, Any],
    form: dict[str, str],
    bodies: list[tuple[str | None, dict[str, Any]]],
    errors: dict[str, str],
    ticked: list[str] | None = None,
) -> list[JobRow] | HTMLResponse:
    """Queue the jobs a page form asks for, each checked like any submission, through the
    one admission (all of them or none); else the page again, saying what was wrong.

    `bodies` pairs each job with the label its refusals go under (errors["targets"]), or
    None to name each refused field on its own; `ticked`, the target boxes the refused page
    keeps ticked."""
    status = 422
    headers: dict[str, str] = {}
    try:
        admission.check_token(form.get("token"), "job submission", bearer=False)
    except HTTPException:
        errors["token"] = "this server needs its submission token"
        status = 401
    valid: list[ValidJob] = []
    for label, body in bodies if not errors else []:
        try:
            valid.append(validate_submission(body, dispatcher.store, state.settings.MAX_JOB_BYTES))
        except HTTPException as exc:
            found = form_errors(exc) if exc.status_code == 422 else {"general": exc.detail}
            if label is None:
                errors.update(found)
            else:
                errors["targets"] = f"{label}: " + "; ".join(found.values())
    if not errors:
        try:
            return admission.queue(admission.client(request), valid)
        except HTTPException as exc:
            errors["targets" if any(label for label, _ in bodies) else "general"] = str(exc.detail)
            status, headers = exc.status_code, dict(exc.headers or {})
    ctx = page_context(state, dispatcher, info=info, values=form, errors=errors, ticked=ticked)
    page = render(state, "artifact.html", ctx, status)
    page.headers.update(headers)
    return page


def dims_of(form: dict[str, str], info: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """The values a page form gives the artifact's symbolic dimensions (`dim.NAME`
    fields), and the problems, each under its `params.dims.NAME`."""
    names = (info.get("header") or {}).get("dimensions") or []
    dims: dict[str, int] = {}
    errors: dict[str, str] = {}
    for name in names:
        field = f"params.dims.{name}"
        text = form.get(f"dim.{name}", "").strip()
        if not text:
            errors[field] = f"{field}: give the dimension {name} a value"
            continue
        try:
            dims[name] = whole_number(field, text, low=1, high=2**31 - 1)
        except FormValueError as exc:
            errors[field] = str(exc)
    return dims, errors
