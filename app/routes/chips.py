"""How far the compiler's cost model is from one chip, across the runs it has made:
`/chips/{device kind}` (the page, `.json` its twin) and `GET /api/v1/chips/{device kind}`,
from one context (`app.pages.chips`). The kind is JAX's own, e.g. `TPU v5 lite`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse

from app.deps import DispatcherDep, StateDep
from app.dispatch import Dispatcher
from app.pages.chips import chip_context
from app.pages.jobs import PREFIX
from app.routes.common import render
from app.routes.routing import reads
from app.routes.schemas import MessagePublic

api_router = APIRouter(prefix=PREFIX, tags=["chips"])
page_router = APIRouter(include_in_schema=False)


def _context(device_kind: str, dispatcher: Dispatcher) -> dict[str, Any]:
    found = chip_context(dispatcher.store, device_kind[:80]) if len(device_kind) <= 80 else None
    if found is None:
        raise HTTPException(
            status_code=404, detail=f"no chip model has the device kind {device_kind[:80]!r}"
        )
    return found


@reads(api_router)(
    "/chips/{device_kind}",
    responses={404: {"model": MessagePublic, "description": "No chip model has that kind."}},
    summary="How far the cost model is from one chip",
)
async def get_chip(device_kind: str, dispatcher: DispatcherDep) -> JSONResponse:
    """Across the valid runs on real chips of this device kind: each run's estimated ÷
    measured device time per call, and every measured instruction's by what it does
    (count, median, quartiles, range, the runs it comes from)."""
    return JSONResponse(_context(device_kind, dispatcher))


@reads(page_router)("/chips/{device_kind}.json")
async def chip_page_json(device_kind: str, dispatcher: DispatcherDep) -> JSONResponse:
    """The chip page's JSON twin: the API's answer."""
    return JSONResponse(_context(device_kind, dispatcher))


@reads(page_router)("/chips/{device_kind}", response_class=HTMLResponse)
async def chip_page(device_kind: str, state: StateDep, dispatcher: DispatcherDep) -> HTMLResponse:
    """The cost model against the chip, by kind of instruction, with links to the runs."""
    ctx = {**_context(device_kind, dispatcher), "nav": "runs"}
    return render(state, "chip.html", ctx)
