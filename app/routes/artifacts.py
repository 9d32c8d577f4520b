"""Uploaded files: exported functions, .npz archives and the Python lines sent with a
function, by API and by page (the upload form's post: `app.routes.artifact_form`).

`POST /api/v1/artifacts?kind=exported|npz|sources` takes the file as the raw request body
(application/octet-stream), refuses it clearly when it is too large (413), unusable
(422) or has no room (507), and stores it once by SHA-256. The pages upload the same
files through an HTML form (multipart, read as it streams by app.web.multipart, token
first) and offer to run what was uploaded. Either way a file goes to disk as it arrives
and into the store in chunks: it is never held whole in memory. The server only reads
headers: a function runs on a worker, never here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, SettingsDep, StateDep
from app.dispatch import Dispatcher
from app.pages.artifact import artifact_context, stored_file, uploaded_reference
from app.queue.submission import (
    field_errors,
)
from app.queue.uploads import UploadError, check_sources_for, check_upload, keep_upload
from app.routes.artifact_common import (
    CLOSE,
    dims_of,
    page_context,
    page_form,
    queue_or_page,
    spool_here,
)
from app.routes.common import is_htmx, render
from app.routes.forms import FormValueError, number, sample_count, whole_number
from app.routes.routing import reads
from app.routes.schemas import MessagePublic, ValidationErrorPublic
from app.settings import Settings
from app.store.files import FileWouldGo
from app.web.spool import OverCap, Spooled, spool_body
from workers.catalog.exported import SHA256

router = APIRouter(tags=["artifacts"])

read_route = reads(router)


ARTIFACT_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": MessagePublic, "description": "Uploading needs the submission token."},
    413: {"model": MessagePublic, "description": "The file is over UPLOAD_MAX_BYTES."},
    415: {"model": MessagePublic, "description": "The body is not application/octet-stream."},
    422: {
        "model": ValidationErrorPublic,
        "description": "The file is corrupted or unusable: its bytes must be a function "
        "jax.export serialized, an .npz archive or a sources document, which no schema of "
        "bytes states.",
    },
    429: {"model": MessagePublic, "description": "Uploads come faster than this client may send."},
    507: {
        "model": MessagePublic,
        "description": "No room: the disk is full, or files that queued jobs need fill "
        "FILES_MAX_BYTES so this one would be removed at once.",
    },
}
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def _store_upload(dispatcher: Dispatcher, kind: str, spooled: Spooled, settings: Settings) -> str:
    """Check and keep one spooled upload: UploadError when it is unusable, FileWouldGo
    when retention would remove it at once."""
    check_upload(kind, spooled)
    if kind == "sources":  # the lines of a function the server keeps, or none
        check_sources_for(dispatcher.store, spooled)
    sha = keep_upload(dispatcher.store, kind, spooled, settings.FILES_MAX_BYTES)
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
    kind: Annotated[str, Query(pattern="^(exported|npz|sources)$")] = "exported",
) -> JSONResponse:
    """Store a file by its SHA-256 (the same bytes twice are stored once) and say what it
    holds: an exported function's platforms and shapes, or an archive's arrays. `sources`:
    the Python lines `boundary export-fn` sent with a function uploaded before (its
    FUNCTION.sources.json, at most 262,144 bytes), which its run pages then show."""
    admission.check_bearer(request, "uploading")
    admission.throttle(admission.client(request))
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/octet-stream":
        raise HTTPException(status_code=415, detail="send the file as application/octet-stream")
    limit = settings.UPLOAD_MAX_BYTES
    try:
        spooled = await spool_body(request.stream(), spool_here(settings), limit)
    except OverCap:
        raise HTTPException(413, f"the file is over {limit:,} bytes", CLOSE) from None
    try:
        # Checking, hashing and storing megabytes is work for a thread, off the event loop.
        sha = await asyncio.to_thread(_store_upload, dispatcher, kind, spooled, settings)
    except UploadError as exc:
        field_errors([("body", f"{kind}: {exc}")])
    except FileWouldGo as exc:
        raise HTTPException(status_code=507, detail=str(exc)) from None
    finally:
        spooled.discard()
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


@router.api_route(
    "/artifacts/new", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False
)
async def new_artifact(state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """The upload form: an exported function, optional inputs and reference outputs."""
    return render(state, "artifact_new.html", page_context(state, dispatcher))


@router.api_route("/artifacts/{sha256}.json", methods=["GET", "HEAD"], include_in_schema=False)
async def artifact_json(sha256: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The page's JSON twin: the file, the targets it fits and its compiles' memory fit."""
    info = stored_file(dispatcher, sha256)
    page = artifact_context(info, dispatcher)
    keep = ["arguments", "results", "mesh", "fitting", "one_click"]
    keep += ["fit", "fit_compared", "fit_elsewhere", "fit_probes"]
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
    *,
    inputs: Annotated[str | None, Query(pattern=SHA256)] = None,
    reference: Annotated[str | None, Query(pattern=SHA256)] = None,
    target: Annotated[list[str] | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """What an exported function declares, and a form to run it on a path. `target`: the
    boxes to tick, those the person compiled for (the compile form redirects here)."""
    info = stored_file(dispatcher, sha256)
    values = {"inputs": inputs or "", "reference": reference or ""}
    if not inputs and not reference:  # the reference export-fn --upload sent, if any
        values.update(uploaded_reference(sha256, dispatcher))
    ctx = page_context(state, dispatcher, info=info, values=values, ticked=target)
    return render(state, "artifact.html", ctx)


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
    dims, errors = dims_of(form, info)
    params: dict[str, Any] = {"artifact": sha256, **({"dims": dims} if dims else {})}
    for name in ("inputs", "reference"):
        if form.get(name, "").strip():
            params[name] = form[name].strip()
    if form.get("input_rules", "").strip():
        try:
            params["input_rules"] = json.loads(form["input_rules"])
        except ValueError as exc:
            errors["params.input_rules"] = f"not JSON: {exc}"
    try:
        params["seed"] = whole_number("seed", form.get("seed") or "0", low=0, high=2**31 - 1)
    except FormValueError as exc:
        errors["params.seed"] = str(exc)
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
