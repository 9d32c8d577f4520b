"""A run's pass pipeline: XLA's steps in order, each change's diff, where the final HLO's
fusions, library calls, collectives and copies came from, and the GPU compiler reports."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import HTMLResponse

from app.deps import DispatcherDep, StateDep
from app.ir.fusion_decisions import fusion_decisions
from app.ir.pipeline import (
    PASS_PIPELINE,
    PIPELINE_ARTIFACT,
    align,
    load_pipeline,
    origins,
    pass_groups,
    pipeline_title,
    step_diff,
)
from app.ir.thunks import thunk_sequence
from app.ir.view import build_view
from app.routes.common import render
from app.routes.errors import MissingPart
from app.routes.routing import reads

router = APIRouter(include_in_schema=False)
INSTRUCTION_NAME = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = ", re.M)
"""An instruction's name where the HLO defines it."""
read_route = reads(router)


def _final_names(hlo: str) -> dict[str, str]:
    """Each instruction name of the final HLO, also under the name XLA:GPU gives its kernel
    (dots made underscores: gemm_fusion_dot_general_1 is %gemm_fusion_dot_general.1)."""
    names: dict[str, str] = {}
    for name in INSTRUCTION_NAME.findall(hlo):
        names.setdefault(name.replace(".", "_").replace("-", "_"), name)
        names[name] = name
    return names


@read_route("/runs/{job_id}/pipeline", response_class=HTMLResponse)
async def run_pipeline(
    job_id: str,
    state: StateDep,
    dispatcher: DispatcherDep,
    step: Annotated[int | None, Query(ge=0, le=10**6)] = None,
) -> HTMLResponse:
    """The pipeline page; `step` shows the diff that step made."""
    found = dispatcher.store.get_artifact(job_id, PIPELINE_ARTIFACT) if len(job_id) <= 64 else None
    if found is None:
        if dispatcher.store.get_job(job_id[:64]) is None:
            raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
        missing = {"job_id": job_id, "capture": None, "title": PASS_PIPELINE, "nav": "runs"}
        return render(state, "pipeline.html", missing, 404)
    capture = load_pipeline(found[0])
    base = f"/runs/{job_id}/pipeline"
    hlo = dispatcher.store.get_artifact(job_id, "hlo")
    final = capture.final or (hlo[0] if hlo else "")
    diff = step_diff(capture, step) if step is not None else None
    if step is not None and diff is None:
        raise MissingPart(
            f"run {job_id} has no changed step {step} in its pass pipeline (the page lists "
            "the steps it has)",
            "No such step",
            ("Back to the pass pipeline", base),
        )
    chosen = next((s for s in capture.steps if s.order == step), None)
    reports: dict[str, Any] = {
        name: build_view("hlo", text, f"{base}#{name}") for name, text in capture.files.items()
    }
    ctx: dict[str, Any] = {
        "job_id": job_id,
        "base": base,
        "capture": capture,
        "groups": pass_groups(capture, base),
        "changed_count": len({s.snapshot for s in capture.steps}) - 1,
        "origins": origins(capture, final),
        "step": chosen,
        "diff": diff,
        "reports": reports,
        "decisions": fusion_decisions(capture.files.get("priority_fusion_dump.txt", "")),
        "thunks": thunk_sequence(capture.files.get("thunk_sequence.txt", "")),
        "final_names": _final_names(final),
        "title": pipeline_title(capture),
        "nav": "runs",
    }
    return render(state, "pipeline.html", ctx)


def _capture_of(dispatcher: Any, job_id: str, side: str) -> Any:
    found = dispatcher.store.get_artifact(job_id, PIPELINE_ARTIFACT) if len(job_id) <= 64 else None
    if found is None:
        # 404, not 422: a browser (the pipeline page's own form) then gets the comparison
        # section's site page with this sentence, not a JSON body.
        raise HTTPException(
            status_code=404,
            detail=f"{side}: run {job_id[:64]!r} has no pass pipeline (run it with --pipeline)",
        )
    return load_pipeline(found[0])


@read_route("/compare/pipelines", response_class=HTMLResponse)
async def compare_pipelines(
    state: StateDep,
    dispatcher: DispatcherDep,
    a: Annotated[str, Query(min_length=1, max_length=64)],
    b: Annotated[str, Query(min_length=1, max_length=64)],
) -> HTMLResponse:
    """Two runs' pass lists side by side, aligned by pass name."""
    capture_a = _capture_of(dispatcher, a, "a")
    capture_b = _capture_of(dispatcher, b, "b")
    rows = align(capture_a, capture_b, f"/runs/{a}/pipeline", f"/runs/{b}/pipeline")
    ctx: dict[str, Any] = {
        "a": a,
        "b": b,
        "rows": rows,
        "both": sum(1 for r in rows if r.a and r.b),
        "only_a": sum(1 for r in rows if r.a and not r.b),
        "only_b": sum(1 for r in rows if r.b and not r.a),
        "nav": "runs",
    }
    return render(state, "compare_pipelines.html", ctx)
