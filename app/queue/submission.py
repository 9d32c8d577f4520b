"""Strict reading of a job submission: JSON only, no NaN, no coercion, bounded size.

The body is read and parsed here rather than by FastAPI so that a NaN literal, a
duplicate key or an oversized body never reaches the default validation handler, and
so every error names its field without echoing the input. The job itself is checked by
`app.queue.validation.validate_job`; here its problems become a 422.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from fastapi import HTTPException, Request

from app.queue.validation import JobRefused, ValidJob, validate_job
from app.store import Store
from app.web.problems import clip, problem_detail


def field_errors(problems: list[tuple[str | None, str]]) -> NoReturn:
    """Raise a 422 listing `problems` as [{"field", "message"}]."""
    raise HTTPException(status_code=422, detail=problem_detail(problems))


async def read_capped_body(request: Request, limit: int, what: str = "body") -> bytes:
    """The request body, or 413 as soon as it passes `limit` bytes (declared or counted),
    so an oversized upload is refused without being held in memory."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(status_code=413, detail=f"the {what} is over {limit:,} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(status_code=413, detail=f"the {what} is over {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_body(request: Request, limit: int) -> Any:
    """The request body parsed strictly as JSON; 415, 413 or 422 otherwise."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise HTTPException(status_code=415, detail="send the job as application/json")
    return parse_strict_json(await read_capped_body(request, limit))


class _Rejected(ValueError):
    pass


def _reject_constant(name: str) -> NoReturn:
    raise _Rejected(f"{name} is not allowed (JSON has no NaN or Infinity)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Rejected(f"duplicate key {clip(key, 40)!r}")
        out[key] = value
    return out


MAX_INT_DIGITS = 4000
"""Python refuses to read integers past 4,300 digits (a ValueError, not a JSON error);
no parameter is anywhere near this long, so longer ones are refused by name first."""


EXACT_INTEGER = 2**53
"""Below this, a float holds every whole number exactly."""


def _parse_float(text: str) -> float | int:
    """A JSON number with a fraction or an exponent: a whole one (`8.0`, `1e3`) is the
    integer it equals, as JSON has one number type and the document's `integer` admits
    it; any other stays a float (`8.5` is no integer)."""
    value = float(text)
    whole = math.isfinite(value) and value.is_integer() and abs(value) < EXACT_INTEGER
    return int(value) if whole else value


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Rejected(f"an integer has {len(text):,} digits (at most {MAX_INT_DIGITS:,})")
    return int(text)


MAX_DEPTH = 64
"""How deeply arrays and objects may nest in a message read by `parse_strict_json`: no
job, matrix or worker report comes near it, and a deeper one would only reach a
recursion limit further on (in validation or serialization) as a 500."""


def parse_strict_json(body: bytes) -> Any:
    """`body` as JSON (a whole number written `8.0` read as 8) with NaN, Infinity,
    duplicate keys, integers of thousands of digits,
    nesting past `MAX_DEPTH` (422 naming 'body') and numbers too large for a float, such
    as 1e999 (422 naming where they are, e.g. 'axis.values.0') refused."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        field_errors([("body", "not UTF-8 text")])
    try:
        data = json.loads(
            text,
            parse_constant=_reject_constant,
            object_pairs_hook=_no_duplicates,
            parse_int=_parse_int,
            parse_float=_parse_float,
        )
    except _Rejected as exc:
        field_errors([("body", str(exc))])
    except json.JSONDecodeError as exc:
        field_errors([("body", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")])
    except RecursionError:
        field_errors([("body", _TOO_DEEP)])
    _check_tree(data)
    return data


_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep (at most {MAX_DEPTH})"
_NOT_FINITE = "a number too large for a 64-bit float (JSON numbers here must be finite)"


def _check_tree(data: Any) -> None:
    """422 for nesting past `MAX_DEPTH`, or for a float json read as infinity (a literal
    such as 1e999), naming its place as a dotted path."""
    if isinstance(data, float) and not math.isfinite(data):
        field_errors([("body", _NOT_FINITE)])
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, dict):
            items: Any = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            continue
        if depth > MAX_DEPTH:
            field_errors([("body", _TOO_DEEP)])
        for key, item in items:
            if isinstance(item, float):
                if not math.isfinite(item):
                    field_errors([(f"{path}{clip(str(key), 40)}", _NOT_FINITE)])
            elif isinstance(item, dict | list):
                stack.append((item, f"{path}{clip(str(key), 40)}.", depth + 1))


def validate_submission(data: Any, store: Store, max_job_bytes: int) -> ValidJob:
    """`validate_job`, and the stored files the job names (an exported function's
    artifact, its reference outputs) must be there and usable: 422 naming the field."""
    from app.queue.job_files import with_files  # reads the store's files

    try:
        valid = validate_job(data, max_job_bytes)
    except JobRefused as exc:
        field_errors(exc.problems)
    valid, problems = with_files(valid, store, max_job_bytes)
    if problems:
        field_errors(problems)
    return valid


def form_errors(exc: HTTPException) -> dict[str, str]:
    """A 422's problems keyed by field ("general" when none is named), for a form."""
    detail: list[dict[str, Any]] = exc.detail if isinstance(exc.detail, list) else []
    return {d.get("field") or "general": d["message"] for d in detail}
