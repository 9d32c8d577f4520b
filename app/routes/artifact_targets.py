"""An uploaded function compiled for targets from its page: one form post queues one
compile per chosen target through the one admission, and the memory-fit table that
fills in as the compiles finish (a fragment htmx polls; without JavaScript the page
refreshes itself).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.responses import Response

from app.deps import AdmissionDep, DispatcherDep, StateDep
from app.pages.artifact import artifact_context, stored_file, target_path
from app.routes.artifact_common import dims_of, page_form, queue_or_page
from app.routes.common import is_htmx, render
from workers.protocol import TargetError, parse_target

router = APIRouter(tags=["artifacts"])

MAX_TARGETS = 32


def compile_job(sha256: str, target_id: str, dims: dict[str, int] | None = None) -> dict[str, Any]:
    """The job that compiles the artifact for one target, without the hardware (its
    symbolic dimensions at `dims`)."""
    target = parse_target(target_id)
    return {
        "workload": "exported",
        "path": target_path(target).value,
        "target": target.id,
        "stages": ["compile"],
        "params": {"artifact": sha256, **({"dims": dims} if dims else {})},
    }


@router.post("/artifacts/{sha256}/compile", response_class=HTMLResponse, include_in_schema=False)
async def compile_for_targets(
    sha256: str,
    request: Request,
    state: StateDep,
    dispatcher: DispatcherDep,
    admission: AdmissionDep,
) -> Response:
    """Queue one compile per chosen target, all through one admission, or none."""
    info = stored_file(dispatcher, sha256)
    pairs = await page_form(request)
    chosen = list(dict.fromkeys(v for k, v in pairs if k == "target" and v))[:MAX_TARGETS]
    dims, errors = dims_of(dict(pairs), info)
    bodies: list[tuple[str | None, dict[str, Any]]] = []
    for target_id in chosen:
        try:
            bodies.append((target_id, compile_job(sha256, target_id, dims)))
        except TargetError as exc:
            errors["targets"] = str(exc)
    if not chosen:
        errors["targets"] = "choose at least one target"
    queued = queue_or_page(
        request,
        state,
        dispatcher,
        admission,
        info=info,
        form=dict(pairs),
        bodies=bodies,
        errors=errors,
        ticked=chosen,
    )
    if not isinstance(queued, list):
        return queued
    # The page comes back with the same boxes ticked: the choice travels in its address.
    page = f"/artifacts/{sha256}?{urlencode([('target', t) for t in chosen], safe=':')}#fit-h"
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": page})
    return RedirectResponse(page, status_code=303)


@router.api_route(
    "/artifacts/{sha256}/fit",
    methods=["GET", "HEAD"],
    response_class=HTMLResponse,
    include_in_schema=False,
)
async def fit_table(sha256: str, state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """The memory-fit table alone: what htmx swaps in while compiles are pending."""
    info = stored_file(dispatcher, sha256)
    ctx = {"info": info, **artifact_context(info, dispatcher)}
    return render(state, "_artifact_fit.html", ctx)
