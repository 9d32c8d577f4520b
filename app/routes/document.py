"""The API's document: what FastAPI generates from the routes, and the answers every
operation may get from the layers in front of its route, which no route declares.

- `app.web.connections` answers any request before it is read: 429 when its client holds
  as many connections as one may, 503 when the server holds as many as it serves (both
  with Retry-After), 408 when a request's headers or body stop arriving.
- `app.web.bodylimit` caps every body a method may carry: 413 past the route's cap, 408
  when it arrives slower than BOUNDARY_BODY_MIN_RATE.
- A 405 names, in Allow, every method the path answers (`app.routes.errors`).

Each is added to an operation that does not document that status itself, so a client (or
schemathesis) reading /openapi.json sees every status the server can answer.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

MESSAGE = {"$ref": "#/components/schemas/MessagePublic"}
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}}

EVERY_REQUEST: dict[str, dict[str, Any]] = {
    "408": {"description": "The request stopped arriving (its headers, or its body)."},
    "429": {
        "description": "This client holds as many connections as one may, or sends faster "
        "than it may.",
        "headers": RETRY_AFTER,
    },
    "503": {
        "description": "The server holds as many connections as it serves, or is starting.",
        "headers": RETRY_AFTER,
    },
}
WITH_A_BODY: dict[str, dict[str, Any]] = {
    "413": {"description": "The body is over the route's cap."},
}
BODY_METHODS = frozenset({"post", "put", "patch", "delete"})


def _json(answer: dict[str, Any]) -> dict[str, Any]:
    return {**answer, "content": {"application/json": {"schema": MESSAGE}}}


def completed(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with every operation's answers from the layers in front of its route."""
    for item in document.get("paths", {}).values():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            added = {**EVERY_REQUEST, **(WITH_A_BODY if method in BODY_METHODS else {})}
            responses = operation["responses"]
            for status, answer in added.items():
                responses.setdefault(status, _json(answer))
    return document


def install(api: FastAPI) -> None:
    """Serve the completed document at /openapi.json (worked out once)."""

    def document() -> dict[str, Any]:
        if api.openapi_schema is None:
            generated = get_openapi(
                title=api.title,
                version=api.version,
                summary=api.summary,
                description=api.description,
                routes=api.routes,
            )
            api.openapi_schema = completed(generated)
        return api.openapi_schema

    api.openapi = document  # type: ignore[method-assign]
