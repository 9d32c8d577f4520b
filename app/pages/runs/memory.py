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
from urllib.parse import quote

from app.ir.view import Keys
from app.pages.runs.memory_charts import HBM_ON_SCALE, Curve, curve_chart, kinds_chart
from workers.protocol import MemoryBuffer, MemoryReport, PathId, RunResult
from workers.protocol.memory import KINDS
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
    "bytes of the heap that no live buffer holds at the peak step: gaps between buffers "
    "(fragmentation) and alignment"
)
TABLE_ROWS = 12
"""Buffers the run page's section lists; the memory page lists them all."""


def no_report_reason(job: dict[str, Any]) -> str:
    """Why a job has no memory report to show (the API's 404)."""
    run = job.get("run")
    if run is None:
        return f"job {job['id']} has no run yet (it is {job['status']})"
    report = run.get("memory_report")
    if isinstance(report, dict) and report.get("withheld"):
        return f"run {job['id']}'s memory report was withheld: {report['withheld']}"
    if job.get("path") == PathId.CUDA.value:
        return f"run {job['id']} is CUDA C++: no XLA buffer assignment to read"
    target = run.get("target") or {}
    if target.get("refused"):
        return f"run {job['id']} has no memory report: the compiler refused the program"
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


def analysis_json(r: Reported) -> dict[str, Any]:
    """memory_analysis()'s figures, the one the peak is compared with and by which rule."""
    compared = r.report.compared_bytes
    difference = (r.report.peak_bytes - compared) / compared if compared else None
    rule = r.report.compared_rule
    return {**r.analysis, "compared_bytes": compared, "rule": rule, "difference": difference}


def memory_json(r: Reported) -> dict[str, Any]:
    """`GET /api/v1/runs/{id}/memory`: the report, biggest buffers first."""
    report = r.report
    return {
        "id": r.job_id,
        "peak_bytes": report.peak_bytes,
        "usable_bytes": r.usable,
        "hbm_bytes": r.hbm,
        "peak_step": report.peak_step,
        "steps": report.steps,
        "by_kind": {**{k: 0 for k in KINDS}, **report.by_kind},
        "padding_bytes": report.padding_bytes,
        "unattributed_bytes": report.unattributed_bytes,
        "memory_analysis": analysis_json(r),
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


@dataclass(frozen=True)
class Link:
    text: str
    href: str


def _source_cell(job_id: str, source: str | None, keys: Keys) -> Link | None:
    """A buffer's `file:line` as the IR view keys it, linked to that line's source panel."""
    if not source or ":" not in source:
        return None
    file, _, line = source.rpartition(":")
    if not line.isdigit():
        return None
    key = keys.key([(file, int(line))])
    text = f"line {key}" if ":" not in key else key
    return Link(text, f"/runs/{job_id}/ir/hlo?src={quote(key, safe='')}")


@dataclass(frozen=True)
class BufferRow:
    """One row of the buffers table (attributes, not a dict: a 200-row table reads them
    thousands of times)."""

    bytes: int
    size: str
    padding: int | None
    padding_text: str
    kind: str
    instructions: list[Link]
    shape: str
    layout: str | None
    op_name: str | None
    source: Link | None
    live: str
    reserved: bool
    """A parameter, output or constant holding its bytes at the peak before (or after)
    its value is live."""


def buffer_row(job_id: str, b: MemoryBuffer, keys: Keys, peak_step: int) -> BufferRow:
    """One row of the buffers table."""
    padding = b.bytes - b.logical_bytes if b.logical_bytes is not None else None
    links = [
        Link(n, f"/runs/{job_id}/ir/hlo?q={quote('%' + n + ' =', safe='')}") for n in b.instructions
    ]
    reserved = b.live_at_peak and b.kind in ("parameter", "output", "constant")
    return BufferRow(
        bytes=b.bytes,
        size=gb(b.bytes),
        padding=padding,
        padding_text=gb(padding) if padding else ("0" if padding == 0 else "—"),
        kind=b.kind,
        instructions=links,
        shape=b.shape,
        layout=b.layout,
        op_name=b.op_name,
        source=_source_cell(job_id, b.source, keys),
        live=f"{b.live[0]:,}–{b.live[1]:,}",
        reserved=reserved and not b.live[0] <= peak_step <= b.live[1],
    )


def _parts(report: MemoryReport) -> list[dict[str, Any]]:
    """The peak's make-up: each kind, then the unattributed bytes, with shares of it."""
    peak = max(report.peak_bytes, 1)
    rows: list[tuple[str, int]] = [(k, report.by_kind.get(k, 0)) for k in KINDS]
    rows.append(("unattributed", report.unattributed_bytes))
    return [
        {"kind": k, "bytes": v, "size": gb(v), "share": f"{100 * v / peak:.3g} %"}
        for k, v in rows
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
    """The report's peak beside memory_analysis()'s figure, with the rule and the gap."""
    compared = report.compared_bytes
    if compared is None:
        return None
    gap = (report.peak_bytes - compared) / compared if compared else 0.0
    return {
        "theirs": gb(compared),
        "theirs_bytes": compared,
        "rule": report.compared_rule,
        "gap": f"{100 * gap:+.2g} %",
        "warn": abs(gap) > 0.01,
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
        live_count=len(live) + report.other.live_at_peak_count,
        more=len(live) - len(shown) + report.other.live_at_peak_count,
        others=[buffer_row(job_id, b, keys, step) for b in listed if not b.live_at_peak]
        if rows is None
        else [],
        other=report.other,
        not_counted=[(name, gb(v)) for name, v in report.not_counted.items()],
    )
    return view
