"""What the routers share: rendering a page, telling an htmx request apart, the paths
connected workers offer, and turning a pydantic error into named field problems.

Routers import these from here and never from each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from app.state import AppState
from app.templating import server_linker

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
    for w in dispatcher.connected_workers():
        for p in w.capabilities.paths:
            if p.value not in paths:
                paths.append(p.value)
    return paths


_UNION_TAGS = frozenset({"int", "str", "float", "bool", "none", "list", "dict"})


def _is_union_tag(part: str | int) -> bool:
    """Pydantic names the member of a union in the error location ('constrained-int')."""
    return isinstance(part, str) and (part in _UNION_TAGS or any(c in part for c in "[-'("))


_PARTS = frozenset({"query", "path", "header", "cookie", "body"})


def request_problems(errors: Sequence[Any]) -> list[dict[str, str | None]]:
    """FastAPI's validation errors for a request's query, path or body, in our shape:
    [{"field", "message"}], the field named (without "query."), the input never echoed."""
    problems: list[dict[str, str | None]] = []
    for err in list(errors)[:20]:
        loc = [str(p) for p in err.get("loc", ()) if not _is_union_tag(p)]
        if len(loc) > 1 and loc[0] in _PARTS and loc[0] != "body":
            loc = loc[1:]
        ctx = err.get("ctx") or {}
        bounds = ", ".join(f"{k}={v}" for k, v in ctx.items() if k in {"ge", "gt", "le", "lt"})
        message = str(err.get("msg", "invalid"))[:300]
        if bounds:
            message = f"{message} (allowed: {bounds})"
        problems.append({"field": ".".join(loc)[:80] or None, "message": message})
    return problems


def pydantic_problems(exc: ValidationError, prefix: str = "") -> list[tuple[str | None, str]]:
    """One problem per field; a union's alternatives are joined into one message."""
    by_field: dict[str | None, list[str]] = {}
    for err in exc.errors(include_url=False, include_input=False, include_context=True):
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p))
        field = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or None)
        message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        ctx = err.get("ctx") or {}
        bounds = ", ".join(f"{k}={v}" for k, v in ctx.items() if k in {"ge", "gt", "le", "lt"})
        if bounds:
            message = f"{message} (allowed: {bounds})"
        messages = by_field.setdefault(field, [])
        if message not in messages:
            messages.append(message)
    return [(field, "; or ".join(messages)) for field, messages in by_field.items()]
