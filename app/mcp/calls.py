"""The tools' work, over the HTTP API: submit, wait a bounded time, answer.

Each function takes a `BoundaryApi` and the tool's arguments, and returns the answer as a
dict (app.mcp.tools bounds it and registers the tool). Jobs and fit searches are
submitted exactly as a program would submit them, so admission, the caps and the result
gate apply unchanged; waiting is polling the API until a final status or the caller's
timeout, after which the answer carries the id to ask again with.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError

from app.mcp.answers import (
    compare_answer,
    fit_answer,
    memory_answer,
    published_run,
    run_answer,
)
from app.mcp.api import BoundaryApi
from app.mcp.bounds import MAX_IR_PAGE_CHARS
from workers.protocol import parse_target

JOBS = "/api/v1/jobs"
FITS = "/api/v1/fits"
POLL_FIRST_S = 0.2
POLL_MOST_S = 2.0
LIVE = frozenset({"queued", "running"})
"""The statuses of a job or a fit search that has not ended."""
STILL_RUNNING = "still running: call again with this id to keep waiting"


async def _follow(api: BoundaryApi, path: str, timeout_s: float) -> Any:
    """GET `path` until its status is no longer live or `timeout_s` passed; the last answer."""
    deadline = time.monotonic() + timeout_s
    pause = POLL_FIRST_S
    while True:
        seen = await api.get(path)
        if seen.get("status") not in LIVE or time.monotonic() >= deadline:
            return seen
        await anyio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(POLL_MOST_S, pause * 1.5)


def job_body(
    workload: str | None,
    artifact: str | None,
    params: dict[str, Any],
    path: str | None,
    target: str | None,
) -> dict[str, Any]:
    """A job for the API: a catalog workload, or an uploaded artifact (the `exported`
    workload naming it by its SHA-256). The path defaults to the target's own."""
    if (workload is None) == (artifact is None):
        raise ToolError("give either workload (a catalog name) or artifact (an uploaded id)")
    body: dict[str, Any] = {
        "workload": workload or "exported",
        "params": {**params, **({"artifact": artifact} if artifact else {})},
    }
    if target is not None:
        body["target"] = target
        if path is None:
            body["path"] = _target_path(target)
    body["path"] = path or body.get("path") or "jax-cpu"
    return body


def _target_path(target: str) -> str:
    try:
        return parse_target(target).chip.paths[0].value
    except ValueError:
        return "jax-cpu"  # the API names the target in its refusal


async def compile_run(
    api: BoundaryApi,
    body: dict[str, Any] | None,
    run_id: str | None,
    timeout_s: float,
) -> dict[str, Any]:
    """Queue a compile-only job (or follow `run_id`), wait, and answer with its summary."""
    if run_id is None:
        assert body is not None
        job = await api.post(JOBS, {**body, "stages": ["compile"]})
        run_id = job["id"]
    job = await _follow(api, f"{JOBS}/{run_id}", timeout_s)
    answer = run_answer(job, api.address(f"/runs/{run_id}"))
    if job["status"] in LIVE:
        answer["next"] = STILL_RUNNING
    elif job["status"] != "done":
        raise ToolError(f"the compile {run_id} {job['status']}: {job.get('reason')}")
    return answer


async def timed_run(
    api: BoundaryApi, body: dict[str, Any] | None, run_id: str | None, timeout_s: float
) -> dict[str, Any]:
    """Queue a timed run (or follow `run_id`). When no connected worker can run it, answer
    at once with the reason it waits; else wait and answer with what the gate published."""
    if run_id is None:
        assert body is not None
        job = await api.post(JOBS, body)
        run_id = job["id"]
    job = await api.get(f"{JOBS}/{run_id}")
    address = api.address(f"/runs/{run_id}")
    if job["status"] == "queued" and job.get("reason"):
        waiting = published_run(job, address)
        waiting["next"] = (
            "it waits in the queue for a capable worker (and expires after the server's "
            "queue timeout); call run with this run_id later to see it"
        )
        return waiting
    job = await _follow(api, f"{JOBS}/{run_id}", timeout_s)
    answer = published_run(job, address)
    if job["status"] in LIVE:
        answer["next"] = STILL_RUNNING
    return answer


async def ir_page(
    api: BoundaryApi, run_id: str, artifact: str, offset: int, max_chars: int
) -> dict[str, Any]:
    """One page of one artifact's text: `max_chars` characters from `offset`."""
    size = min(max_chars, MAX_IR_PAGE_CHARS)
    text, stored_cut = await api.text(f"{JOBS}/{run_id}/artifacts/{artifact}")
    total = len(text)
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of {artifact} ({total:,} characters)")
    page = text[offset : offset + size]
    end = offset + len(page)
    return {
        "run_id": run_id,
        "artifact": artifact,
        "offset": offset,
        "chars": len(page),
        "total_chars": total,
        "next_offset": end if end < total else None,
        "stored_truncated": stored_cut,
        "text": page,
    }


async def memory_report(api: BoundaryApi, run_id: str, top: int) -> dict[str, Any]:
    report = await api.get(f"/api/v1/runs/{run_id}/memory")
    return memory_answer(report, top, api.address(f"/runs/{run_id}/memory"))


async def compare_runs(api: BoundaryApi, a: str, b: str) -> dict[str, Any]:
    """The comparison page's JSON twin and the HLO diff of the two runs."""
    pair = {"a": a, "b": b}
    page = await api.get("/compare.json", pair)
    diff = None
    if page.get("compiled"):  # both compiled: their optimized HLO can be paired
        diff = await api.get("/api/v1/compare/hlo-diff", pair)
    answer = compare_answer(page, diff)
    answer["address"] = api.address(f"/compare?a={a}&b={b}")
    return answer


async def fit_search(
    api: BoundaryApi, body: dict[str, Any] | None, fit_id: str | None, timeout_s: float
) -> dict[str, Any]:
    """Start a fit search (or follow `fit_id`); its table when done, else its id."""
    if fit_id is None:
        assert body is not None
        fit_id = (await api.post(FITS, body))["id"]
    search = await _follow(api, f"{FITS}/{fit_id}", timeout_s)
    answer = fit_answer(search, api.address(f"/fits/{fit_id}"))
    if search.get("status") in LIVE:
        answer["next"] = STILL_RUNNING
    return answer
