"""How the worker API reads a worker's message: the one helper every route uses, so that
FastAPI's lenient JSON never sees one (NaN, Infinity and duplicate keys are refused, as
on the public API), and each route's OpenAPI body for the model it reads by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from app.queue.submission import field_errors, parse_strict_json, read_capped_body
from app.routes.schemas import inline_schema
from app.web.bodylimit import WORKER_BODY_BYTES

MessageT = TypeVar("MessageT", bound=BaseModel)


def _parsed(
    body: bytes, model: type[MessageT], check: Callable[[Any], None] | None = None
) -> MessageT:
    """`body` as `model`: strict JSON (NaN, Infinity and duplicate keys refused, as on the
    public API), `check` on the parsed JSON (it raises), then the model's own rules with
    no type coerced, or 422 naming each field."""
    data = parse_strict_json(body)
    if check is not None:
        check(data)
    try:
        # Strict, as the document says: `true` is no integer and "8" no number (read from
        # the JSON text, where an enum's value is its string).
        return model.model_validate_json(body, strict=True)
    except ValidationError as exc:
        field_errors(
            [
                (".".join(str(p) for p in e["loc"]) or "body", e["msg"])
                for e in exc.errors(include_url=False, include_input=False)
            ]
        )


async def read_message(
    request: Request,
    model: type[MessageT],
    *,
    limit: int = WORKER_BODY_BYTES,
    check: Callable[[Any], None] | None = None,
    off_loop: bool = False,
) -> MessageT:
    """The one way a worker's message is read: its body capped at `limit` (413 past it),
    then `_parsed`, so FastAPI's lenient JSON never sees it; `off_loop` parses a large
    one (a result) in the thread pool, so it does not stall other requests."""
    body = await read_capped_body(request, limit)
    if off_loop:
        return await run_in_threadpool(_parsed, body, model, check)
    return _parsed(body, model, check)


def body_of(model: type[BaseModel], *, exactly_one: tuple[str, ...] = ()) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads `model` by hand; with `exactly_one`,
    the fields of which a message carries exactly one (each of the others null or left
    out), as the route checks."""
    schema = inline_schema(model)
    if exactly_one:
        schema["oneOf"] = [
            {
                "required": [name],
                "properties": {
                    name: {"not": {"type": "null"}},
                    **{other: {"type": "null"} for other in exactly_one if other != name},
                },
            }
            for name in exactly_one
        ]
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }
