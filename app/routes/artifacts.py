"""Uploaded files: exported functions and .npz archives, by API and by page.

`POST /api/v1/artifacts?kind=exported|npz` takes the file as the raw request body
(application/octet-stream), refuses it clearly when it is too large (413) or unusable
(422), and stores it once by SHA-256. The pages upload the same files through an HTML
form (multipart, parsed with the standard library) and offer to run what was uploaded.
The server only reads headers: a function runs on a worker, never here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, SettingsDep, StateDep
from app.dispatch import Dispatcher
from app.pages.artifact import artifact_context
from app.queue.submission import (
    field_errors,
    form_errors,
    read_capped_body,
    validate_submission,
)
from app.queue.uploads import KINDS, UploadError, describe, kind_of, parse_multipart
from app.queue.validation import ValidJob
from app.routes.common import connected_paths, is_htmx, render
from app.routes.forms import FormValueError, number, sample_count
from app.routes.routing import reads
from app.routes.schemas import MessagePublic, ValidationErrorPublic
from app.store import JobRow
from app.web.tokens import token_matches
from workers.catalog.exported import JAX_PLATFORM, SHA256
from workers.protocol import CachePolicy, Mode

router = APIRouter(tags=["artifacts"])

read_route = reads(router)


ARTIFACT_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": MessagePublic, "description": "Uploading needs the submission token."},
    413: {"model": MessagePublic, "description": "The file is over UPLOAD_MAX_BYTES."},
    415: {"model": MessagePublic, "description": "The body is not application/octet-stream."},
    422: {"model": ValidationErrorPublic, "description": "The file is corrupted or unusable."},
}
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def stored_file(dispatcher: Dispatcher, sha256: str) -> dict[str, Any]:
    """The public description of a stored upload, or 404."""
    found = dispatcher.store.get_file(sha256) if len(sha256) == 64 else None
    kind = kind_of(found.media_type) if found is not None else None
    if found is None or kind is None:
        raise HTTPException(status_code=404, detail=f"no uploaded file {sha256[:64]!r}")
    try:
        described = describe(kind, found.data)
    except UploadError as exc:  # stored before a stricter check: say so, do not fail
        described = {"problem": str(exc)}
    return {
        "sha256": found.sha256,
        "kind": kind,
        "media_type": found.media_type,
        "size": found.size,
        **described,
        "links": {
            "self": f"/api/v1/artifacts/{found.sha256}",
            "page": f"/artifacts/{found.sha256}",
        },
    }


def _store_upload(dispatcher: Dispatcher, kind: str, data: bytes) -> str:
    """Check and keep an upload; UploadError when it is unusable."""
    if not data:
        raise UploadError("the file is empty")
    describe(kind, data)
    sha = dispatcher.store.put_file(data, KINDS[kind])
    dispatcher.prune()  # the files' cap holds after every upload, not only every interval
    return sha


@router.post(
    "/api/v1/artifacts",
    status_code=201,
    responses=ARTIFACT_ERRORS,
    openapi_extra=UPLOAD_BODY,
    summary="Upload an exported function or an .npz archive",
)
async def upload_artifact(
    request: Request,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    admission: AdmissionDep,
    kind: Annotated[str, Query(pattern="^(exported|npz)$")] = "exported",
) -> JSONResponse:
    """Store a file by its SHA-256 (the same bytes twice are stored once) and say what it
    holds: an exported function's platforms and shapes, or an archive's arrays."""
    admission.check_bearer(request, "uploading")
    admission.throttle(admission.client(request))
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/octet-stream":
        raise HTTPException(status_code=415, detail="send the file as application/octet-stream")
    data = await read_capped_body(request, settings.UPLOAD_MAX_BYTES, "file")
    try:
        # Hashing, checking and storing megabytes is CPU work: off the event loop.
        sha = await asyncio.to_thread(_store_upload, dispatcher, kind, data)
    except UploadError as exc:
        field_errors([("body", f"{kind}: {exc}")])
    body = stored_file(dispatcher, sha)
    return JSONResponse(body, status_code=201, headers={"Location": body["links"]["self"]})


@read_route(
    "/api/v1/artifacts/{sha256}",
    responses={404: {"model": MessagePublic}},
    summary="Describe an uploaded file",
)
async def get_artifact_info(sha256: str, dispatcher: DispatcherDep) -> JSONResponse:
    """An uploaded file's kind, size and contents (header or arrays)."""
    return JSONResponse(stored_file(dispatcher, sha256))


# --- pages --------------------------------------------------------------------------------


def page_context(
    state: StateDep,
    dispatcher: Dispatcher,
    *,
    info: dict[str, Any] | None = None,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The upload form's, or an uploaded file's page's, context."""
    paths: list[str] = []
    if info is not None and "header" in info:
        platforms = info["header"]["platforms"]
        paths = [p.value for p, name in JAX_PLATFORM.items() if name in platforms]
    return {
        **(artifact_context(info, dispatcher) if info is not None else {}),
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


@router.api_route(
    "/artifacts/new", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False
)
async def new_artifact(state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """The upload form: an exported function, optional inputs and reference outputs."""
    return render(state, "artifact_new.html", page_context(state, dispatcher))


@router.post("/artifacts", response_class=HTMLResponse, include_in_schema=False)
async def upload_from_page(
    request: Request, state: StateDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> Response:
    """Store the uploaded files, then show the artifact's page with them chosen."""
    settings = state.settings
    admission.throttle(admission.client(request))  # before a byte of the body is read
    content_type = request.headers.get("content-type", "")
    errors: dict[str, str] = {}

    def again(status: int) -> HTMLResponse:
        ctx = page_context(state, dispatcher, errors=errors)
        return render(state, "artifact_new.html", ctx, status)

    if not content_type.lower().startswith("multipart/form-data"):
        errors["artifact"] = "send the form as multipart/form-data"
        return again(415)
    limit = 3 * settings.UPLOAD_MAX_BYTES + 64 * 1024
    try:
        body = await read_capped_body(request, limit, "file")
    except HTTPException:
        errors["artifact"] = f"the files are over {settings.UPLOAD_MAX_BYTES:,} bytes each"
        return again(413)
    try:
        # The multipart parse is CPU work on up to three files: off the event loop.
        fields = await asyncio.to_thread(parse_multipart, body, content_type)
    except UploadError as exc:
        errors["artifact"] = str(exc)
        return again(422)
    token = settings.SUBMIT_TOKEN
    given = fields.get("token", (None, b""))[1].decode(errors="replace")
    if token is not None and not token_matches(given, token):
        errors["token"] = "this server needs its submission token"
        return again(401)
    stored: dict[str, str] = {}
    for name, kind in (("artifact", "exported"), ("inputs", "npz"), ("reference", "npz")):
        _, data = fields.get(name, (None, b""))
        if not data:
            if name == "artifact":
                errors[name] = "choose a .jaxexport file (made by boundary export-fn)"
            continue
        if len(data) > settings.UPLOAD_MAX_BYTES:
            errors[name] = f"over {settings.UPLOAD_MAX_BYTES:,} bytes"
            continue
        try:
            stored[name] = await asyncio.to_thread(_store_upload, dispatcher, kind, data)
        except UploadError as exc:
            errors[name] = str(exc)
    if errors:
        return again(413 if any("over" in e for e in errors.values()) else 422)
    query = "&".join(f"{k}={v}" for k, v in stored.items() if k != "artifact")
    return RedirectResponse(f"/artifacts/{stored['artifact']}?{query}", status_code=303)


@router.api_route("/artifacts/{sha256}.json", methods=["GET", "HEAD"], include_in_schema=False)
async def artifact_json(sha256: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The page's JSON twin: the file, the targets it fits and its compiles' memory fit."""
    info = stored_file(dispatcher, sha256)
    page = artifact_context(info, dispatcher)
    keep = ("arguments", "results", "fitting", "one_click", "fit")
    return JSONResponse({**info, **{k: page[k] for k in keep}})


@router.api_route(
    "/artifacts/{sha256}",
    methods=["GET", "HEAD"],
    response_class=HTMLResponse,
    include_in_schema=False,
)
async def artifact_page(
    sha256: str,
    state: StateDep,
    dispatcher: DispatcherDep,
    inputs: Annotated[str | None, Query(pattern=SHA256)] = None,
    reference: Annotated[str | None, Query(pattern=SHA256)] = None,
) -> HTMLResponse:
    """What an exported function declares, and a form to run it on a path."""
    info = stored_file(dispatcher, sha256)
    values = {"inputs": inputs or "", "reference": reference or ""}
    return render(state, "artifact.html", page_context(state, dispatcher, info=info, values=values))


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
) -> list[JobRow] | HTMLResponse:
    """Queue the jobs a page form asks for, each checked like any submission, through the
    one admission (all of them or none); else the page again, saying what was wrong.

    `bodies` pairs each job with the label its refusals go under (errors["targets"]), or
    None to name each refused field on its own."""
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
    ctx = page_context(state, dispatcher, info=info, values=form, errors=errors)
    page = render(state, "artifact.html", ctx, status)
    page.headers.update(headers)
    return page


@router.post("/artifacts/{sha256}/runs", response_class=HTMLResponse, include_in_schema=False)
async def run_artifact(
    sha256: str,
    request: Request,
    state: StateDep,
    dispatcher: DispatcherDep,
    admission: AdmissionDep,
) -> Response:
    """Queue a job for the uploaded function from its page's form."""
    info = stored_file(dispatcher, sha256)
    form = dict(await page_form(request))
    errors: dict[str, str] = {}
    params: dict[str, Any] = {"artifact": sha256}
    for name in ("inputs", "reference"):
        if form.get(name, "").strip():
            params[name] = form[name].strip()
    if form.get("input_rules", "").strip():
        try:
            params["input_rules"] = json.loads(form["input_rules"])
        except ValueError as exc:
            errors["params.input_rules"] = f"not JSON: {exc}"
    if form.get("tolerance", "").strip():
        try:
            params["tolerance"] = number("tolerance", form["tolerance"])
        except FormValueError as exc:
            errors["params.tolerance"] = str(exc)
    measure: dict[str, Any] = {
        "mode": form.get("mode", "latency"),
        "cache": form.get("cache", "cold"),
    }
    try:
        measure["samples"] = sample_count(form.get("samples", "20"))
    except FormValueError as exc:
        errors["measure.samples"] = str(exc)
    body = {
        "workload": "exported",
        "path": form.get("path", "jax-cpu"),
        "params": params,
        "measure": measure,
    }
    queued = queue_or_page(
        request,
        state,
        dispatcher,
        admission,
        info=info,
        form=form,
        bodies=[(None, body)],
        errors=errors,
    )
    if not isinstance(queued, list):
        return queued
    (job,) = queued
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": f"/runs/{job.id}"})
    return RedirectResponse(f"/runs/{job.id}", status_code=303)
