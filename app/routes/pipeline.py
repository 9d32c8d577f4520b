"""A run's pass pipeline: XLA's steps in order, each change's diff, where the final HLO's
fusions, library calls, collectives and copies came from, and the GPU compiler reports;
and each Pallas kernel's own passes (Mosaic and LLO, Triton, Mosaic GPU), each step with
its diff and its IR, linked line by line to the kernel body's source."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse

from app.deps import DispatcherDep, StateDep
from app.ir.fusion_decisions import fusion_decisions
from app.ir.pipeline import (
    KERNEL_PIPELINES_ARTIFACT,
    PASS_PIPELINE,
    PIPELINE_ARTIFACT,
    STEP_ARTIFACT,
    align,
    load_kernel_pipelines,
    load_pipeline,
    origins,
    pass_groups,
    pipeline_title,
    step_diff,
)
from app.ir.thunks import thunk_sequence
from app.ir.view import SourceText, build_view
from app.pages.jobs import job_public
from app.routes.common import IrQueryDep, render
from app.routes.errors import MissingPart
from app.routes.routing import reads
from workers.protocol.hlo import instruction_heads

router = APIRouter(include_in_schema=False)
read_route = reads(router)


def _final_names(hlo: str) -> dict[str, str]:
    """Each instruction name of the final HLO, also under the name XLA:GPU gives its kernel
    (dots made underscores: gemm_fusion_dot_general_1 is %gemm_fusion_dot_general.1)."""
    names: dict[str, str] = {}
    for name, _, _ in instruction_heads(hlo):
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
    kernels = _kernel_links(dispatcher, job_id)
    if found is None:
        if dispatcher.store.get_job(job_id[:64]) is None:
            raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
        missing = {
            "job_id": job_id,
            "capture": None,
            "kernels": kernels,
            "title": PASS_PIPELINE,
            "nav": "runs",
        }
        return render(state, "pipeline.html", missing, 200 if kernels else 404)
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
        "kernels": kernels,
        "nav": "runs",
    }
    return render(state, "pipeline.html", ctx)


def _kernel_captures(dispatcher: Any, job_id: str) -> dict[str, Any]:
    found = (
        dispatcher.store.get_artifact(job_id, KERNEL_PIPELINES_ARTIFACT)
        if len(job_id) <= 64
        else None
    )
    return load_kernel_pipelines(found[0]) if found is not None else {}


def _kernel_links(dispatcher: Any, job_id: str) -> list[tuple[str, str]]:
    return [
        (name, f"/runs/{job_id}/pipeline/kernels/{quote(name, safe='')}")
        for name in _kernel_captures(dispatcher, job_id)
    ]


def _kernel_capture(dispatcher: Any, job_id: str, kernel: str) -> Any:
    capture = _kernel_captures(dispatcher, job_id).get(kernel)
    if capture is None:
        if len(job_id) > 64 or dispatcher.store.get_job(job_id) is None:
            raise HTTPException(status_code=404, detail=f"no job {job_id[:64]!r}")
        raise HTTPException(
            status_code=404,
            detail=f"run {job_id} has no passes of a kernel {kernel[:60]!r} "
            "(a Pallas kernel's passes come with --pipeline)",
        )
    return capture


@read_route("/runs/{job_id}/pipeline/kernels/{kernel}", response_class=HTMLResponse)
async def kernel_pipeline(
    job_id: str,
    kernel: str,
    state: StateDep,
    dispatcher: DispatcherDep,
    step: Annotated[int | None, Query(ge=0, le=10**6)] = None,
) -> HTMLResponse:
    """One Pallas kernel's own passes; `step` shows the diff that step made."""
    capture = _kernel_capture(dispatcher, job_id, kernel)
    base = f"/runs/{job_id}/pipeline/kernels/{quote(kernel, safe='')}"
    diff = step_diff(capture, step) if step is not None else None
    if step is not None and diff is None:
        raise HTTPException(status_code=404, detail=f"no changed step {step} in this pipeline")
    ctx: dict[str, Any] = {
        "job_id": job_id,
        "kernel": kernel,
        "base": base,
        "capture": capture,
        "groups": pass_groups(capture, base),
        "changed_count": len({s.snapshot for s in capture.steps}) - 1,
        "step": next((s for s in capture.steps if s.order == step), None),
        "diff": diff,
        "nav": "runs",
    }
    return render(state, "kernel_pipeline.html", ctx)


def _step_text(capture: Any, order: int) -> tuple[Any, str]:
    chosen = next((s for s in capture.steps if s.order == order), None)
    if chosen is None or chosen.snapshot >= len(capture.snapshots):
        raise HTTPException(status_code=404, detail=f"no step {order} with its IR kept")
    return chosen, capture.snapshots[chosen.snapshot]


@read_route("/runs/{job_id}/pipeline/kernels/{kernel}/steps/{order}.txt")
async def kernel_step_text(
    job_id: str, kernel: str, order: int, dispatcher: DispatcherDep
) -> PlainTextResponse:
    """The IR after one step of a kernel's passes, whole, as text (declared before the
    step's page, whose `{order}` would otherwise take "3.txt")."""
    _, text = _step_text(_kernel_capture(dispatcher, job_id, kernel), order)
    return PlainTextResponse(text)


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


@read_route("/runs/{job_id}/pipeline/kernels/{kernel}/steps/{order}", response_class=HTMLResponse)
async def kernel_step(
    job_id: str,
    kernel: str,
    order: int,
    *,
    request: Request,
    state: StateDep,
    dispatcher: DispatcherDep,
    query: IrQueryDep,
) -> HTMLResponse:
    """The IR after one step of a kernel's passes, in the IR view: searchable, paged, and
    (Mosaic, Triton, Mosaic GPU) each line linked to the kernel body's source line."""
    capture = _kernel_capture(dispatcher, job_id, kernel)
    chosen, text = _step_text(capture, order)
    row = dispatcher.store.get_job(job_id)
    run = job_public(row, dispatcher).get("run") if row is not None else None
    base = f"/runs/{job_id}/pipeline/kernels/{quote(kernel, safe='')}"
    name = STEP_ARTIFACT.get(chosen.pipeline, "mosaic")
    source = SourceText.from_run(run) if run else None
    view = query.view(name, text, f"{base}/steps/{order}", source, request)
    ctx: dict[str, Any] = {
        "job_id": job_id,
        "kernel": kernel,
        "base": base,
        "step": chosen,
        "name": name,
        "view": view,
        "src": query.src,
        "source_sha": "",
        "download": f"{base}/steps/{order}.txt",
        "cut_at": None,  # a kernel's pass is stored whole with its pipeline
        "nav": "runs",
    }
    if query.part == "lines":
        return render(state, "_ir_lines.html", ctx)
    return render(state, "kernel_step.html", ctx)
