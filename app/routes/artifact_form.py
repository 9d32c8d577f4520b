"""The upload form's post: an exported function, the Python lines `boundary export-fn`
wrote beside it, and optional inputs and reference outputs, read as the form streams
(app.web.multipart: its token first, then each file to disk under its own cap), every
file checked before any is kept, then kept as one (`keep_together`). The form itself and
the pages it leads to are `app.routes.artifacts`'.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, StateDep
from app.queue.uploads import UploadError, check_sources_for, check_upload, keep_together
from app.routes.artifact_common import CLOSE, page_context, spool_here
from app.routes.common import render
from app.store.files import FileWouldGo
from app.web.multipart import FormPolicy, FormRefused, read_form
from workers.catalog.jaxexport import MAX_SOURCES_BYTES

router = APIRouter(tags=["artifacts"])

UPLOAD_FIELDS = {
    "artifact": "exported",
    "sources": "sources",
    "inputs": "npz",
    "reference": "npz",
}
"""The upload form's file fields, in the order they are stored, with their kinds."""


@router.post("/artifacts", response_class=HTMLResponse, include_in_schema=False)
async def upload_from_page(
    request: Request, state: StateDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> Response:
    """Store the uploaded files, then show the artifact's page with them chosen.

    The form is read as it streams (app.web.multipart): its token first, then each file
    to disk under its own cap, so no upload is ever held in memory."""
    settings = state.settings
    admission.throttle(admission.client(request))  # before a byte of the body is read
    errors: dict[str, str] = {}

    def again(status: int, headers: dict[str, str] | None = None) -> HTMLResponse:
        ctx = page_context(state, dispatcher, errors=errors)
        page = render(state, "artifact_new.html", ctx, status)
        page.headers.update(headers or {})
        return page

    cap = settings.UPLOAD_MAX_BYTES
    policy = FormPolicy(
        files={
            "artifact": cap,
            "sources": min(cap, MAX_SOURCES_BYTES),
            "inputs": cap,
            "reference": cap,
        },
        text=frozenset(),
        token=settings.SUBMIT_TOKEN,
    )
    try:
        form = await read_form(
            request.stream(),
            request.headers.get("content-type", ""),
            policy,
            spool_here(settings),
            request.headers.get("authorization", ""),
        )
    except FormRefused as exc:
        shown = exc.field if exc.field in (*UPLOAD_FIELDS, "token") else "general"
        errors[shown] = exc.message if shown != "general" else f"{exc.field}: {exc.message}"
        return again(exc.status, CLOSE)
    parts = {name: part for name in UPLOAD_FIELDS if (part := form.files.get(name)) is not None}
    stored: dict[str, str] = {}
    status = 422
    try:
        if "artifact" not in parts:
            errors["artifact"] = "choose a .jaxexport file (made by boundary export-fn)"
        for name, part in parts.items():  # every file checked before any is kept
            try:
                await asyncio.to_thread(check_upload, UPLOAD_FIELDS[name], part)
                if name == "sources" and "artifact" in parts:  # the lines of this function
                    artifact = parts["artifact"].sha256
                    await asyncio.to_thread(check_sources_for, dispatcher.store, part, artifact)
            except UploadError as exc:
                errors[name] = str(exc)
        if not errors:
            try:
                kinds = {name: (UPLOAD_FIELDS[name], part) for name, part in parts.items()}
                stored = await asyncio.to_thread(
                    keep_together,
                    dispatcher.store,
                    dispatcher.prune,
                    kinds,
                    settings.FILES_MAX_BYTES,
                )
            except FileWouldGo as exc:
                errors["general"] = str(exc)
                status = 507
    finally:
        form.discard()
    if errors:
        return again(status)
    query = "&".join(f"{k}={v}" for k, v in stored.items() if k not in ("artifact", "sources"))
    return RedirectResponse(f"/artifacts/{stored['artifact']}?{query}", status_code=303)
