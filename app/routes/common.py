"""What the routers share: rendering a page, telling an htmx request apart and the paths
connected workers offer. Validation errors in plain words are in app.web.problems.

Routers import these from here rather than from one another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from app.state import AppState
from app.web.templating import server_linker

if TYPE_CHECKING:
    from app.dispatch import Dispatcher


def is_htmx(request: Request) -> bool:
    """True for an htmx request that wants a fragment (not a history restore)."""
    return (
        request.headers.get("hx-request") == "true"
        and "hx-history-restore-request" not in request.headers
        and request.headers.get("hx-request-type") != "full"
    )


def render(
    state: AppState, template: str, ctx: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """A template with what base.html needs, as an uncached HTML response."""
    assets = state.assets
    html = state.env.get_template(template).render(
        site=state.content.site,
        content_version=state.content.version,
        link=server_linker(""),
        static=lambda name: assets[name].url,
        export=False,
        embed=False,
        **ctx,
    )
    return HTMLResponse(html, status_code, headers={"Cache-Control": "no-store"})


def connected_paths(dispatcher: Dispatcher) -> list[str]:
    """The paths some connected worker offers, in the order they were first seen."""
    paths: list[str] = []
    for w in dispatcher.recent_workers():
        for p in w.capabilities.paths:
            if p.value not in paths:
                paths.append(p.value)
    return paths
