"""Strict reading of a job submission: JSON only, no NaN, no coercion, bounded size.

The body is read and parsed here rather than by FastAPI so that a NaN literal, a
duplicate key or an oversized body never reaches the default validation handler, and
so every error names its field without echoing the input.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any, NoReturn

from fastapi import HTTPException, Request
from pydantic import ValidationError

from app.routes.common import pydantic_problems
from app.store import Store
from workers.catalog import WORKLOADS, CatalogError, allowed_range, parse_params
from workers.catalog.target_rules import apply_target, byte_cap
from workers.protocol import MAX_SAMPLES, JobSpec

MAX_FIELD_CHARS = 80
MAX_ERRORS = 20


def field_errors(problems: list[tuple[str | None, str]]) -> NoReturn:
    """Raise a 422 listing `problems` as [{"field", "message"}]."""
    detail = [
        {"field": _clip(field) if field else None, "message": _clip(message, 300)}
        for field, message in problems[:MAX_ERRORS]
    ]
    raise HTTPException(status_code=422, detail=detail)


def _clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_bearer(request: Request, expected: str | None, what: str) -> None:
    """Refuse (401) a request without `Authorization: Bearer <expected>`."""
    if expected is None:
        raise HTTPException(
            status_code=401,
            detail=f"{what} needs a token, and none is configured on this server",
            headers={"WWW-Authenticate": "Bearer"},
        )
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), expected.encode()
    )
    if not ok:
        message = "missing bearer token" if not header else "wrong bearer token"
        raise HTTPException(
            status_code=401,
            detail=f"{what}: {message}",
            headers={"WWW-Authenticate": "Bearer"},
        )


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
            raise _Rejected(f"duplicate key {_clip(key, 40)!r}")
        out[key] = value
    return out


MAX_INT_DIGITS = 4000
"""Python refuses to read integers past 4,300 digits (a ValueError, not a JSON error);
no parameter is anywhere near this long, so longer ones are refused by name first."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Rejected(f"an integer has {len(text):,} digits (at most {MAX_INT_DIGITS:,})")
    return int(text)


def parse_strict_json(body: bytes) -> Any:
    """`body` as JSON with NaN, Infinity, duplicate keys and integers of thousands of
    digits refused (422 naming 'body')."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        field_errors([("body", "not UTF-8 text")])
    try:
        return json.loads(
            text,
            parse_constant=_reject_constant,
            object_pairs_hook=_no_duplicates,
            parse_int=_parse_int,
        )
    except _Rejected as exc:
        field_errors([("body", str(exc))])
    except json.JSONDecodeError as exc:
        field_errors([("body", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")])
    except RecursionError:
        field_errors([("body", "nested too deeply")])


@dataclass(frozen=True)
class ValidJob:
    """A submission that passed every check, with the devices its parameters span."""

    spec: JobSpec
    devices: int


def _with_range(message: str, model: Any, field: str | None) -> str:
    """`message`, and the parameter's declared range when it has one ("1 ≤ m ≤ 16384")."""
    name = (field or "").removeprefix("params.").split(".", 1)[0]
    declared = allowed_range(model, name) if name and name in model.model_fields else None
    return f"{message} (allowed: {declared})" if declared else message


def _param_problems(cls: Any, params: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Every bad parameter of a workload, in plain words, each with its allowed range."""
    try:
        cls.model_validate(params)
    except ValidationError as exc:
        return [
            (field, _with_range(message, cls, field))
            for field, message in pydantic_problems(exc, "params.")
        ]
    return []


def validate_job(data: Any, max_job_bytes: int) -> ValidJob:
    """Check a parsed submission against the protocol and the catalog (422 on failure)."""
    if not isinstance(data, dict):
        field_errors([("body", "expected a JSON object")])
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        # The parameters' problems too, so that a bad sample count does not hide them
        # until the next attempt (the run form shows every field's problem at once).
        params, name = data.get("params"), data.get("workload")
        known = WORKLOADS.get(name) if isinstance(name, str) else None
        extra = _param_problems(known, params) if known and isinstance(params, dict) else []
        field_errors([*pydantic_problems(exc), *extra])
    cls_or_none = WORKLOADS.get(spec.workload)
    if cls_or_none is not None:
        # Every bad parameter at once, in plain words, each with its whole allowed range.
        problems_now = _param_problems(cls_or_none, spec.params)
        if problems_now:
            field_errors(problems_now)
    try:
        # A target's pairing with the path and workload, and its device count (which a
        # scale workload's `devices` defaults to), before the parameters are parsed.
        spec = apply_target(spec)
        params = parse_params(spec.workload, spec.params, byte_cap(spec, max_job_bytes))
    except CatalogError as exc:
        field_errors([(exc.field, str(exc))])
    cls = WORKLOADS[spec.workload]
    problems: list[tuple[str | None, str]] = []
    if spec.path not in cls.paths:
        offered = ", ".join(p.value for p in cls.paths)
        problems.append(
            ("path", f"{spec.workload} does not run on {spec.path} (offers: {offered})")
        )
    for stage in spec.stages:
        if stage not in cls.stages:
            offered = ", ".join(s.value for s in cls.stages)
            problems.append(("stages", f"{spec.workload} has no {stage} stage (offers: {offered})"))
    if len(set(spec.stages)) != len(spec.stages):
        problems.append(("stages", "a stage is named twice"))
    samples = spec.measure.samples
    if isinstance(samples, int) and not 1 <= samples <= MAX_SAMPLES:
        problems.append(("measure.samples", f"out of range (allowed: ge=1, le={MAX_SAMPLES})"))
    if problems:
        field_errors(problems)
    return ValidJob(spec, params.devices())


def validate_submission(data: Any, store: Store, max_job_bytes: int) -> ValidJob:
    """`validate_job`, and the stored files the job names (an exported function's
    artifact, its reference outputs) must be there and usable: 422 naming the field."""
    from app.queue.uploads import check_job_files  # app.queue.uploads reads the store's files

    valid = validate_job(data, max_job_bytes)
    problems = check_job_files(valid.spec, store, max_job_bytes)
    if problems:
        field_errors(problems)
    return valid


def form_errors(exc: HTTPException) -> dict[str, str]:
    """A 422's problems keyed by field ("general" when none is named), for a form."""
    detail: list[dict[str, Any]] = exc.detail if isinstance(exc.detail, list) else []
    return {d.get("field") or "general": d["message"] for d in detail}
