"""The memory report: the compiler's own plan of one device's memory for a compiled run.

Built on the worker (`workers.compiler.memory_report`) from XLA's buffer assignment and
its schedule; the server checks it (`bounded_memory_report`) before it stores or shows
it. Pydantic and the standard library only: both halves import it.

What the figures are: the compiler's plan for one device (every device of an SPMD program
runs the same one), before the runtime allocator's own overheads and, on a GPU, before
JAX's preallocation of a fraction of the device's memory. A buffer that aliases an
argument (a donated one) is counted once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workers.protocol.base import OpenModel

MemoryKind = Literal["parameter", "output", "temporary", "constant", "other"]
KINDS: tuple[MemoryKind, ...] = ("parameter", "output", "temporary", "constant", "other")

MAX_BUFFERS = 200
"""Buffers a report lists; the rest are counted in `MemoryReport.other`."""
MAX_TIMELINE = 2_000
"""Points of the live-bytes curve a report keeps (its peak always among them)."""
PEAK_TOLERANCE = 0.01
"""How far the report's peak may be from `memory_analysis()`'s figure (the stated rule's)
before the server withholds the report."""


class MemoryBuffer(OpenModel):
    """One value of the buffer assignment, or values that share its bytes while live."""

    bytes: int = Field(description="Bytes the compiler set aside for it (its slot's size).")
    logical_bytes: int | None = Field(
        default=None,
        description="Its shape's element count × the dtype's width; bytes − logical_bytes "
        "is the padding of a tiled layout. None for a tuple (a table of pointers).",
    )
    kind: MemoryKind
    instructions: list[str] = Field(
        default_factory=list, description="The HLO instructions that define it, in order."
    )
    shape: str = ""
    layout: str | None = Field(default=None, description="e.g. {1,0:T(8,128)(2,1)} on TPU.")
    op_name: str | None = Field(default=None, description="The JAX operation (HLO metadata).")
    source: str | None = Field(default=None, description="file:line of the user's frame.")
    live: list[int] = Field(description="[first_step, last_step] in program order.")
    live_at_peak: bool = False
    allocation: int = Field(default=0, description="The allocation it sits in.")
    offset: int = Field(default=0, description="Its offset in that allocation.")


class MemoryOther(OpenModel):
    """The buffers past the report's first MAX_BUFFERS, counted together."""

    count: int = 0
    bytes: int = 0
    live_at_peak_count: int = 0
    live_at_peak_bytes: int = 0


class MemoryReport(OpenModel):
    """Which buffers the compiler placed in one device's memory, when each is live, and
    what is live at the peak."""

    peak_bytes: int = Field(description="The maximum of the live-bytes curve.")
    peak_step: int = Field(description="The first step of the schedule that reaches it.")
    steps: int = Field(description="Instructions in the schedule (nested ones flattened).")
    by_kind: dict[str, int] = Field(
        default_factory=dict, description="Bytes of the buffers live at the peak, by kind."
    )
    padding_bytes: int = Field(
        default=0, description="Allocated minus logical bytes of the buffers live at the peak."
    )
    unattributed_bytes: int = Field(
        default=0,
        description="peak_bytes minus the buffers live at the peak: bytes reserved with no "
        "live value in them then (outputs not yet written, gaps left by the heap's "
        "offsets, alignment).",
    )
    allocated: dict[str, int] = Field(
        default_factory=dict,
        description="Bytes of the allocations by kind, as the compiler reserved them "
        "(temporary: its heap blocks' sizes).",
    )
    on_chip_peak_bytes: int | None = Field(
        default=None,
        description="TPU: the most bytes live at once in VMEM (memory space 1) over the "
        "schedule; libtpu's own peak counts it where it passes the HBM heap's.",
    )
    compared_bytes: int | None = Field(
        default=None, description="memory_analysis()'s figure the peak is compared with."
    )
    compared_rule: str = Field(default="", description="Which figure that is, and why.")
    buffers: list[MemoryBuffer] = Field(default_factory=list, description="Biggest first.")
    other: MemoryOther = Field(default_factory=MemoryOther)
    timeline: list[list[int]] = Field(
        default_factory=list, description="[step, live bytes], in step order."
    )
    not_counted: dict[str, int] = Field(
        default_factory=dict,
        description="Bytes the compiler placed that are not part of the peak: other memory "
        "spaces by colour (TPU VMEM 1 and SMEM 2, host memory), and the tuple tables of the "
        "heap blocks (pointers, a few bytes each).",
    )
    source: str = Field(default="", description="The compiler's files the report was read from.")
    cost: str | None = Field(
        default=None, description="What writing and reading the dump cost, in words."
    )
    withheld: str | None = Field(
        default=None,
        description="Why the server withheld the report's figures (they disagree with each "
        "other or with memory_analysis()); only the two peaks are then kept.",
    )


FLAT: tuple[str, ...] = ("parameter", "output", "constant")
"""The kinds of allocation held for the whole program."""

CPU_GPU_RULE = (
    "memory_analysis(): arguments + outputs + temporaries − aliased bytes (a donated "
    "argument counted once) + constants, which it leaves out"
)
TPU_RULE = "libtpu's own peak (memory_analysis().peak_memory_in_bytes)"
TPU_VMEM_RULE = (
    "libtpu's own peak (memory_analysis().peak_memory_in_bytes) less {vmem:,} bytes: over "
    "the parameters and outputs it counts the larger of the HBM heap's peak and VMEM's, "
    "and here VMEM's is the larger"
)


def compared_figure(
    report: MemoryReport,
    *,
    tpu: bool,
    argument: int | None,
    output: int | None,
    temp: int | None,
    alias: int | None,
    peak: int | None,
) -> tuple[int | None, str]:
    """The figure of `memory_analysis()` the report's peak should meet, and the rule that
    says which: on CPU and GPU the allocations it counts, added up; on a TPU libtpu's own
    peak, less the VMEM it counts in place of the HBM heap."""
    if tpu:
        if peak is None:
            return None, TPU_RULE
        flat = sum(report.allocated.get(k, 0) for k in FLAT)
        heap = max(report.peak_bytes - flat, 0)
        vmem = max((report.on_chip_peak_bytes or 0) - heap, 0)
        return (peak - vmem, TPU_VMEM_RULE.format(vmem=vmem)) if vmem else (peak, TPU_RULE)
    if None in (argument, output, temp):
        return None, CPU_GPU_RULE
    constants = report.allocated.get("constant", 0)
    total = (argument or 0) + (output or 0) + (temp or 0) - (alias or 0) + constants
    return total, CPU_GPU_RULE


def live_at_peak_bytes(report: MemoryReport) -> int:
    """Bytes of every buffer live at the peak, the ones counted in `other` included."""
    listed = sum(b.bytes for b in report.buffers if b.live_at_peak)
    return listed + report.other.live_at_peak_bytes


def _counts(report: MemoryReport) -> list[int]:
    figures = [report.peak_bytes, report.peak_step, report.steps, report.padding_bytes]
    figures += [report.unattributed_bytes, *report.by_kind.values(), *report.allocated.values()]
    figures += list(report.not_counted.values())
    figures += [report.other.count, report.other.bytes]
    figures += [report.other.live_at_peak_count, report.other.live_at_peak_bytes]
    for b in report.buffers:
        figures += [b.bytes, b.allocation, b.offset, *b.live]
        figures += [b.logical_bytes] if b.logical_bytes is not None else []
    figures += [x for point in report.timeline for x in point]
    return figures


def report_problem(report: MemoryReport, compared: int | None) -> str | None:
    """Why the server would not publish `report` (its figures disagree with each other or
    with the figure of memory_analysis() its rule names), or None when it holds together."""
    if any(x < 0 for x in _counts(report)):
        return "a negative figure"
    if len(report.buffers) > MAX_BUFFERS or len(report.timeline) > MAX_TIMELINE:
        return "more buffers or curve points than a report may carry"
    if any(len(b.live) != 2 or b.live[0] > b.live[1] for b in report.buffers):
        return "a live range that ends before it starts"
    if any(len(p) != 2 for p in report.timeline):
        return "a curve point that is not [step, bytes]"
    curve = {p[0]: p[1] for p in report.timeline}
    if report.timeline and (max(curve.values()) != report.peak_bytes):
        return "the curve's maximum is not the peak"
    if report.timeline and curve.get(report.peak_step) != report.peak_bytes:
        return "the curve does not reach the peak at peak_step"
    if live_at_peak_bytes(report) + report.unattributed_bytes != report.peak_bytes:
        return "the buffers live at the peak and the unattributed bytes do not add up to it"
    if sum(report.by_kind.values()) != live_at_peak_bytes(report):
        return "the bytes by kind do not add up to the buffers live at the peak"
    if compared and abs(report.peak_bytes - compared) > PEAK_TOLERANCE * compared:
        return (
            f"its peak ({report.peak_bytes:,} bytes) is more than 1% from the compiler's "
            f"figure ({compared:,} bytes: {report.compared_rule})"
        )
    return None


def _capped(b: MemoryBuffer) -> MemoryBuffer:
    return b.model_copy(
        update={
            "instructions": [i[:200] for i in b.instructions[:16]],
            "shape": b.shape[:400],
            "layout": b.layout[:200] if b.layout is not None else None,
            "op_name": b.op_name[:400] if b.op_name is not None else None,
            "source": b.source[:400] if b.source is not None else None,
        }
    )


def published_report(
    report: MemoryReport | None,
    *,
    tpu: bool,
    argument: int | None,
    output: int | None,
    temp: int | None,
    alias: int | None,
    peak: int | None,
) -> MemoryReport | None:
    """`report` as the server publishes it: its words capped, the figure it is compared
    with worked out again from memory_analysis() (`compared_figure`), and every figure
    withheld, with the reason, when `report_problem` finds one. Applying it twice changes
    nothing."""
    if report is None:
        return None
    figure, rule = compared_figure(
        report, tpu=tpu, argument=argument, output=output, temp=temp, alias=alias, peak=peak
    )
    report = report.model_copy(
        update={
            "compared_bytes": figure,
            "compared_rule": rule,
            "buffers": [_capped(b) for b in report.buffers],
            "source": report.source[:400],
            "cost": report.cost[:400] if report.cost is not None else None,
        }
    )
    problem = report.withheld or report_problem(report, figure)
    if problem is None:
        return report
    return MemoryReport(
        peak_bytes=max(report.peak_bytes, 0),
        peak_step=0,
        steps=0,
        compared_bytes=figure,
        compared_rule=rule,
        source=report.source,
        withheld=problem[:400],
    )
