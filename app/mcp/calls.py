"""The tools' work, over the HTTP API: submit, wait a bounded time, answer.

Each function takes a `BoundaryApi` and the tool's arguments, and returns the answer as a
dict (app.mcp.tools bounds it and registers the tool). Jobs and fit searches are
submitted exactly as a program would submit them, so admission, the caps and the result
gate apply unchanged; waiting is polling the API until a final status or the caller's
timeout, after which the answer carries the id to ask again with.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from app.ir.pipeline import PIPELINE_ARTIFACT
from app.mcp.answers import (
    compare_answer,
    fit_answer,
    memory_answer,
    published_run,
    run_answer,
)
from app.mcp.api import BoundaryApi, Refused
from app.mcp.arguments import checked_id, finite, refused, segment
from app.mcp.bounds import MAX_IR_PAGE_CHARS
from workers.catalog import LIVE
from workers.protocol import ARTIFACT_NAMES, parse_target

JOBS = "/api/v1/jobs"
FITS = "/api/v1/fits"
STILL_RUNNING = "still running: call again with this id to keep waiting"
IR_NAMES = (*ARTIFACT_NAMES, PIPELINE_ARTIFACT)
"""The artifacts a run may have, as the API names them."""


async def existing_job(api: BoundaryApi, field: str, run_id: str) -> dict[str, Any]:
    """The API's job `run_id` names; a refusal naming `field` when there is none."""
    checked_id(field, run_id)
    try:
        job: dict[str, Any] = await api.get(f"{JOBS}/{segment(run_id)}")
    except Refused as exc:
        if exc.status != 404:
            raise
        raise refused(field, f"no run {run_id!r} on this server (HTTP 404)") from None
    return job


def job_body(
    workload: str | None,
    artifact: str | None,
    params: dict[str, Any],
    path: str | None,
    target: str | None,
    *,
    compiler_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job for the API: a catalog workload, or an uploaded artifact (the `exported`
    workload naming it by its SHA-256). The path defaults to the target's own."""
    if (workload is None) == (artifact is None):
        raise refused(
            "workload, artifact", "give either workload (a catalog name) or artifact (an id)"
        )
    finite("params", params)
    finite("compiler_options", compiler_options)
    body: dict[str, Any] = {
        "workload": workload or "exported",
        "params": {**params, **({"artifact": artifact} if artifact else {})},
    }
    if compiler_options:
        body["compiler_options"] = compiler_options
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
    with api.waiting(timeout_s):
        if run_id is None:
            assert body is not None
            job = await api.post(JOBS, {**body, "stages": ["compile"]})
            run_id = job["id"]
        else:
            await existing_job(api, "run_id", run_id)
        job = await api.follow(f"{JOBS}/{segment(run_id)}", timeout_s)
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
    with api.waiting(timeout_s):
        if run_id is None:
            assert body is not None
            job = await api.post(JOBS, body)
            run_id = job["id"]
        job = await existing_job(api, "run_id", run_id)
        address = api.address(f"/runs/{run_id}")
        if job["status"] == "queued" and job.get("reason"):
            waiting = published_run(job, address)
            waiting["next"] = (
                "it waits in the queue for a capable worker (and expires after the server's "
                "queue timeout); call run with this run_id later to see it"
            )
            return waiting
        job = await api.follow(f"{JOBS}/{segment(run_id)}", timeout_s)
        answer = published_run(job, address)
        if job["status"] in LIVE:
            answer["next"] = STILL_RUNNING
        return answer


async def ir_page(
    api: BoundaryApi, run_id: str, artifact: str, offset: int, max_chars: int
) -> dict[str, Any]:
    """One page of one artifact's text: `max_chars` characters from `offset`."""
    size = min(max_chars, MAX_IR_PAGE_CHARS)
    checked_id("run_id", run_id)
    if artifact not in IR_NAMES:  # never a path to follow: say what this run has
        job = await existing_job(api, "run_id", run_id)
        has = sorted((job.get("run") or {}).get("artifact_links") or {})
        listed = f"it has {', '.join(has)}" if has else f"it has none: the job is {job['status']}"
        raise refused("artifact", f"run {run_id} has no artifact {artifact[:40]!r} ({listed})")
    text, stored_cut = await api.text(f"{JOBS}/{segment(run_id)}/artifacts/{artifact}")
    total = len(text)
    if offset > total:
        raise refused("offset", f"{offset} is past the end of {artifact} ({total:,} characters)")
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
        **({"cut": _cut_note(text)} if stored_cut else {}),
        "text": page,
    }


def _cut_note(text: str) -> str:
    """What a text stored cut is: its beginning, as many bytes as the cap kept."""
    return f"only the first {len(text.encode()):,} bytes were kept: the text stops there"


async def memory_report(api: BoundaryApi, run_id: str, top: int) -> dict[str, Any]:
    checked_id("run_id", run_id)
    report = await api.get(f"/api/v1/runs/{segment(run_id)}/memory")
    return memory_answer(report, top, api.address(f"/runs/{run_id}/memory"))


async def compare_runs(api: BoundaryApi, a: str, b: str) -> dict[str, Any]:
    """The comparison page's JSON twin and the HLO diff of the two runs."""
    for field, run_id in (("a", a), ("b", b)):  # an unknown run is named as such
        await existing_job(api, field, run_id)
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
    with api.waiting(timeout_s):
        if fit_id is None:
            assert body is not None
            fit_id = (await api.post(FITS, body))["id"]
        checked_id("fit_id", fit_id, "fit search")
        search = await api.follow(f"{FITS}/{segment(fit_id)}", timeout_s)
        answer = fit_answer(search, api.address(f"/fits/{fit_id}"))
        if search.get("status") in LIVE:
            answer["next"] = STILL_RUNNING
        return answer
