"""Why it does not fit: a run's memory report, as the API returns it and the pages show it.

The report is the compiler's own buffer assignment for one device, read by the worker
(`workers.compiler.memory_report`) and checked by the server (`workers.protocol.memory`).
`memory_json` is `GET /api/v1/runs/{id}/memory`; `memory_view` the run page's Memory
section and `/runs/{id}/memory`, built from the same report: the live-bytes curve with
the peak and the chip's HBM, the peak's make-up by kind, and the buffers live at the peak
biggest first, each linked to its instruction in the HLO and to its source line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.ir.view import Keys
from app.pages.runs.memory_charts import HBM_ON_SCALE, Curve, curve_chart, kinds_chart
from app.pages.runs.memory_rows import block_row, buffer_row
from workers.protocol import MemoryReport, PathId, RunResult
from workers.protocol.dumps import first_of
from workers.protocol.memory import KINDS, PEAK_RULES, platform_of, program_peak
from workers.protocol.sizes import byte_text as gb

SCOPE = (
    "This is the compiler's plan for one device{where}: the buffers XLA assigned before the "
    "program ran, without the runtime allocator's own overheads{gpu}. A buffer that aliases "
    "an argument (a donated one) is counted once. Parameters, outputs and constants hold "
    "their bytes for the whole program (the runtime reserves an output's buffer before the "
    "program starts), so an output written later still counts at the peak; its live range "
    "says when it is written."
)
GPU_SCOPE = ", and before JAX sets aside its share of the GPU's memory at start-up (75% by default)"
UNATTRIBUTED = (
    "bytes of the allocations held for the whole program that no value covers at the "
    "peak's step (alignment)"
)
TABLE_ROWS = 12
"""Buffers the run page's section lists; the memory page lists them all."""


def no_report_reason(job: dict[str, Any]) -> str:
    """Why a job has no memory report to show."""
    run = job.get("run")
    if run is None:
        return f"job {job['id']} has no run yet (it is {job['status']})"
    report = run.get("memory_report")
    if isinstance(report, dict) and report.get("withheld"):
        return f"run {job['id']}'s memory report was withheld: {report['withheld']}"
    if job.get("path") == PathId.CUDA.value:
        return f"run {job['id']} is CUDA C++: no XLA buffer assignment to read"
    completes = first_of(str(job["id"]))
    if completes is not None:
        return (
            f"job {job['id']} makes the dumps of run {completes}, which went first: the "
            f"memory report is that run's (/runs/{completes}/memory)"
        )
    target = run.get("target") or {}
    if target.get("refused"):
        return (
            f"run {job['id']} has no buffer assignment: the compiler refused the program "
            "(its refusal is on the run page)"
        )
    return (
        f"run {job['id']} has no memory report: its worker sent none (a run made before "
        "memory reports, or a compile that wrote no buffer assignment)"
    )


@dataclass(frozen=True)
class Reported:
    """A run's report with the few facts of the run it is shown with: read from the run's
    JSON without validating the whole run (its HLO and samples are large, and none of
    them is needed here)."""

    job_id: str
    report: MemoryReport
    analysis: dict[str, Any]
    """memory_analysis() as published, or {}."""
    hbm: int | None
    """The chip's published HBM per device, from the server's table; None on the host."""
    usable: int | None
    """What the device may hold (libtpu's reading, JAX's GPU share); None if not reported."""
    target: str | None
    gpu: bool
    source_path: str
    """The workload source's file (the IR view keys its lines by number), or ''."""

    @classmethod
    def from_json(cls, job_id: str, run: dict[str, Any]) -> Reported | None:
        found = run.get("memory_report")
        if not isinstance(found, dict):
            return None
        target = run.get("target") or {}
        memory = target.get("memory") or {}
        return cls(
            job_id,
            MemoryReport.model_validate(found),
            run.get("memory_analysis") or {},
            memory.get("hbm_bytes"),
            memory.get("usable_bytes"),
            target.get("id"),
            (run.get("job") or {}).get("path") == PathId.JAX_GPU.value,
            str((run.get("source") or {}).get("path") or ""),
        )

    @classmethod
    def from_run(cls, job_id: str, run: RunResult) -> Reported | None:
        if run.memory_report is None:
            return None
        memory = run.target.memory if run.target is not None else None
        return cls(
            job_id,
            run.memory_report,
            run.memory_analysis.model_dump() if run.memory_analysis is not None else {},
            memory.hbm_bytes if memory is not None else None,
            memory.usable_bytes if memory is not None else None,
            run.target.id if run.target is not None else None,
            run.job.path is PathId.JAX_GPU,
            run.source.path if run.source is not None else "",
        )

    @property
    def scope(self) -> str:
        """What the report is, for this run's device (the honest edges)."""
        where = f" of {self.target}" if self.target else " (this worker's own)"
        return SCOPE.format(where=where, gpu=GPU_SCOPE if self.gpu else "")


def run_peak(run: dict[str, Any]) -> int | None:
    """A run's one peak: memory_analysis()'s figure by its platform's rule (the CPU's
    temporaries added to its own peak, which leaves them out)."""
    analysis = run.get("memory_analysis") or {}
    platform = platform_of((run.get("job") or {}).get("path"))
    return program_peak(platform, peak=analysis.get("peak_bytes"), temp=analysis.get("temp_bytes"))


def missing_json(job: dict[str, Any]) -> dict[str, Any]:
    """`GET /api/v1/runs/{id}/memory` for a job with no report to show: why, and the
    compiler's peak by its platform's rule where the run has memory_analysis()."""
    run = job.get("run") or {}
    analysis = run.get("memory_analysis") or {}
    platform = platform_of((run.get("job") or {}).get("path") or job.get("path"))
    peak = run_peak(run)
    return {
        "id": job["id"],
        "reason": no_report_reason(job),
        "peak_bytes": peak,
        "memory_analysis": {**analysis, "compared_bytes": peak, "rule": PEAK_RULES[platform]},
        "buffers": [],
        "links": {"page": f"/runs/{job['id']}/memory", "run": f"/runs/{job['id']}"},
    }


def analysis_json(r: Reported) -> dict[str, Any]:
    """memory_analysis()'s figures, the one the peak is compared with and by which rule."""
    compared = r.report.compared_bytes
    difference = (r.report.peak_bytes - compared) / compared if compared else None
    rule = r.report.compared_rule
    return {
        **r.analysis,
        "compared_bytes": compared,
        "rule": rule,
        "difference": difference,
        "why": r.report.difference,
    }


def memory_json(r: Reported) -> dict[str, Any]:
    """`GET /api/v1/runs/{id}/memory`: the report, biggest buffers first."""
    report = r.report
    return {
        "id": r.job_id,
        "reason": f"the report's figures were withheld: {report.withheld}"
        if report.withheld
        else None,
        "peak_bytes": report.peak_bytes,
        "usable_bytes": r.usable,
        "hbm_bytes": r.hbm,
        "peak_step": report.peak_step,
        "steps": report.steps,
        "by_kind": {**{k: 0 for k in KINDS}, **report.by_kind},
        "padding_bytes": report.padding_bytes,
        "unattributed_bytes": report.unattributed_bytes,
        "memory_analysis": analysis_json(r),
        "blocks": [k.model_dump(mode="json") for k in report.blocks],
        "buffers": [b.model_dump(mode="json") for b in report.buffers],
        "other": report.other.model_dump(),
        "timeline": report.timeline,
        "allocated": report.allocated,
        "not_counted": report.not_counted,
        "on_chip_peak_bytes": report.on_chip_peak_bytes,
        "scope": r.scope,
        "source": report.source,
        "cost": report.cost,
        "links": {"page": f"/runs/{r.job_id}/memory", "run": f"/runs/{r.job_id}"},
    }


def _parts(report: MemoryReport) -> list[dict[str, Any]]:
    """The peak's make-up: what the buffers hold by kind, each block counted whole (a
    TPU's VMEM block), then the unattributed bytes, with shares of it."""
    peak = max(report.peak_bytes, 1)
    rows: list[tuple[str, str, int]] = [(k, k, report.by_kind.get(k, 0)) for k in KINDS]
    rows += [("block", f"{k.name} block", k.counted_bytes) for k in report.blocks]
    rows.append(("unattributed", "unattributed", report.unattributed_bytes))
    return [
        {"kind": k, "label": label, "bytes": v, "size": gb(v), "share": f"{100 * v / peak:.3g} %"}
        for k, label, v in rows
        if v > 0 or k in ("parameter", "output", "temporary")
    ]


def _hbm_note(peak: int, limit: int | None, word: str) -> str | None:
    """What the curve says of the device's capacity when its line would be off the picture."""
    if limit is None or limit <= HBM_ON_SCALE * peak:
        return None
    return (
        f"The device's {word} bytes ({gb(limit)}) are {limit / max(peak, 1):,.0f}× this peak: "
        "off this scale."
    )


def _comparison(report: MemoryReport) -> dict[str, Any] | None:
    """The report's peak beside memory_analysis()'s figure, with the rule, the gap and,
    where they differ by more than 1%, why."""
    compared = report.compared_bytes
    if compared is None:
        return None
    gap = (report.peak_bytes - compared) / compared if compared else 0.0
    return {
        "theirs": gb(compared),
        "theirs_bytes": compared,
        "rule": report.compared_rule,
        "same": report.peak_bytes == compared,
        "gap": f"{100 * gap:+.2g} %",
        "warn": report.difference is not None,
        "why": report.difference,
    }


def memory_view(
    r: Reported | None, *, rows: int | None = TABLE_ROWS, chart_prefix: str = "memory"
) -> dict[str, Any] | None:
    """The section's figures, pictures and table (None without a report); `rows` caps
    the table (None: every listed buffer)."""
    if r is None:
        return None
    report, job_id = r.report, r.job_id
    view: dict[str, Any] = {
        "available": True,
        "scope": r.scope,
        "peak": gb(report.peak_bytes),
        "peak_bytes": report.peak_bytes,
        "compare": _comparison(report),
        "withheld": report.withheld,
        "links": {"page": f"/runs/{job_id}/memory", "json": f"/api/v1/runs/{job_id}/memory"},
        "source": report.source,
        "cost": report.cost,
    }
    if report.withheld:
        return view
    hbm = r.usable or r.hbm
    word = "usable" if r.usable else "HBM"
    keys = Keys(r.source_path)
    listed = sorted(report.buffers, key=lambda b: (not b.live_at_peak, -b.bytes))
    live = [b for b in listed if b.live_at_peak]
    shown = live if rows is None else live[:rows]
    parts = _parts(report)
    bars = [(p["kind"], p["bytes"]) for p in parts]
    curve = Curve(report.timeline, report.steps, report.peak_bytes, report.peak_step, hbm, word)
    step = report.peak_step
    view.update(
        hbm=gb(hbm) if hbm is not None else None,
        limit_word=word,
        published=gb(r.hbm) if r.usable and r.hbm else None,
        share=f"{100 * report.peak_bytes / hbm:.3g} %" if hbm else None,
        hbm_note=_hbm_note(report.peak_bytes, hbm, word),
        step=step,
        steps=report.steps,
        parts=parts,
        padding=gb(report.padding_bytes) if report.padding_bytes else "0",
        padding_bytes=report.padding_bytes,
        unattributed=gb(report.unattributed_bytes) if report.unattributed_bytes else "0",
        unattributed_why=UNATTRIBUTED,
        curve=curve_chart(curve, chart_id=f"{chart_prefix}-curve"),
        bar=kinds_chart(bars, report.peak_bytes, chart_id=f"{chart_prefix}-kinds"),
        rows=[buffer_row(job_id, b, keys, step) for b in shown],
        blocks=[block_row(job_id, k, keys) for k in report.blocks],
        live_count=len(live) + report.other.live_at_peak_count,
        more=len(live) - len(shown) + report.other.live_at_peak_count,
        others=[buffer_row(job_id, b, keys, step) for b in listed if not b.live_at_peak]
        if rows is None
        else [],
        other=report.other,
        not_counted=[(name, gb(v)) for name, v in report.not_counted.items()],
    )
    return view


def missing_view(answer: dict[str, Any]) -> dict[str, Any]:
    """The section for a run with no report (`missing_json`'s answer): why, and the
    compiler's peak where it gave one."""
    peak = answer.get("peak_bytes")
    return {
        "available": False,
        "scope": None,
        "reason": answer["reason"],
        "peak": gb(int(peak)) if peak is not None else None,
        "peak_bytes": peak,
        "rule": answer["memory_analysis"]["rule"],
        "links": {
            "page": answer["links"]["page"],
            "json": f"/api/v1/runs/{answer['id']}/memory",
        },
    }
