"""The memory report: the compiler's own plan of one device's memory for a compiled run.

Built on the worker (`workers.compiler.memory_report`) from XLA's buffer assignment and
its schedule; the server checks it (`published_report`) before it stores or shows it.
Pydantic and the standard library only: both halves import it.

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
"""How far the report's peak may be from `memory_analysis()`'s figure (the platform's
rule) before the report shows both and says why (`MemoryReport.difference`)."""


class MemoryBuffer(OpenModel):
    """One value of the buffer assignment."""

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
    source: str | None = Field(
        default=None,
        description="file:line of the innermost frame in the user's own files (outside "
        "installed packages) of the instruction that defines it.",
    )
    library: str | None = Field(
        default=None,
        description="file:line of the innermost frame inside an installed package under "
        "that line (a flax layer's), when the user's line called into one.",
    )
    parameter_path: str | None = Field(
        default=None,
        description="A parameter's argument by its pytree path (params/blocks/0/w).",
    )
    live: list[int] = Field(description="[first_step, last_step] in program order.")
    live_at_peak: bool = False
    held_bytes: int | None = Field(
        default=None,
        description="Bytes of the peak it holds at the peak's step: its bytes, less those "
        "it shares there with a value given them (an output's buffer lent to a temporary "
        "keeps the rest). None where not live at the peak (a report made before this field: "
        "its bytes).",
    )
    allocation: int = Field(default=0, description="The allocation it sits in.")
    offset: int = Field(default=0, description="Its offset in that allocation.")

    @property
    def held(self) -> int:
        """Bytes of the peak it holds (0 where not live at the peak)."""
        if not self.live_at_peak:
            return 0
        return self.bytes if self.held_bytes is None else self.held_bytes


class MemoryOther(OpenModel):
    """The buffers past the report's first MAX_BUFFERS, counted together."""

    count: int = 0
    bytes: int = 0
    live_at_peak_count: int = 0
    live_at_peak_bytes: int = Field(default=0, description="Bytes of the peak they hold.")


class MemoryValue(OpenModel):
    """One value of a block, where it sits and when it is live."""

    instruction: str
    bytes: int
    offset: int
    live: list[int] = Field(description="[first_step, last_step] in program order.")
    op_name: str | None = None
    source: str | None = None


class MemoryBlock(OpenModel):
    """A block the compiler reserves whole (a heap of temporaries, a TPU's VMEM), its
    size, how much of it is live at the peak's step, and what sets its size."""

    name: str = Field(description="temporaries, VMEM, … with its allocation.")
    memory_space: int = Field(default=0, description="0: the device's main memory.")
    bytes: int = Field(description="Its size, as reserved.")
    live_bytes: int = Field(
        default=0, description="Bytes of its values live at the peak's step (each byte once)."
    )
    counted_bytes: int = Field(
        default=0,
        description="Bytes of the peak counted as this block itself rather than as listed "
        "buffers: libtpu's VMEM block where its peak counts it; 0 for a heap whose values "
        "are the buffers.",
    )
    set_by: MemoryValue | None = Field(
        default=None, description="The value whose top (offset + bytes) is the block's size."
    )
    why: str = Field(default="", description="What the block is and what sets its size.")


MAX_BLOCKS = 16
"""Blocks a report lists."""


class MemoryReport(OpenModel):
    """Which buffers the compiler placed in one device's memory, when each is live, and
    what is live at the peak."""

    peak_bytes: int = Field(
        description="The maximum of the live-bytes curve: the compiler's own peak, counted "
        "from its buffer assignment (compared_bytes is memory_analysis()'s)."
    )
    peak_step: int = Field(description="The step of the schedule the peak is read at.")
    steps: int = Field(description="Instructions in the schedule (nested ones flattened).")
    by_kind: dict[str, int] = Field(
        default_factory=dict, description="Bytes the buffers hold at the peak, by kind."
    )
    padding_bytes: int = Field(
        default=0, description="Allocated minus logical bytes of the buffers live at the peak."
    )
    unattributed_bytes: int = Field(
        default=0,
        description="peak_bytes minus what the buffers at the peak hold and the blocks "
        "counted whole: bytes of a reserved allocation no value covers (alignment).",
    )
    allocated: dict[str, int] = Field(
        default_factory=dict,
        description="Bytes of the allocations by kind, as the compiler reserved them "
        "(temporary: its heap blocks' sizes).",
    )
    blocks: list[MemoryBlock] = Field(
        default_factory=list,
        description="The blocks reserved whole: each heap of temporaries (its size beside "
        "its values live at the peak) and a TPU's VMEM.",
    )
    on_chip_peak_bytes: int | None = Field(
        default=None,
        description="TPU: the size of its VMEM block (memory space 1), which libtpu's peak "
        "counts in place of the HBM temporaries where it is the larger.",
    )
    compared_bytes: int | None = Field(
        default=None, description="memory_analysis()'s figure the peak is compared with."
    )
    compared_rule: str = Field(default="", description="Which figure that is, and why.")
    difference: str | None = Field(
        default=None,
        description="Where the peak is more than 1% from compared_bytes: both figures and "
        "why they differ. None where they agree.",
    )
    buffers: list[MemoryBuffer] = Field(default_factory=list, description="Biggest first.")
    other: MemoryOther = Field(default_factory=MemoryOther)
    timeline: list[list[int]] = Field(
        default_factory=list, description="[step, live bytes], in step order."
    )
    not_counted: dict[str, int] = Field(
        default_factory=dict,
        description="Bytes the compiler placed that are not part of the peak: other memory "
        "spaces by colour (TPU SMEM 2, host memory), and the tuple tables of a TPU's heap "
        "blocks (pointers, a few bytes each).",
    )
    source: str = Field(default="", description="The compiler's files the report was read from.")
    cost: str | None = Field(
        default=None, description="What writing and reading the dump cost, in words."
    )
    withheld: str | None = Field(
        default=None,
        description="Why the server withheld the report's figures (they do not add up "
        "among themselves); only the two peaks are then kept.",
    )


FLAT: tuple[str, ...] = ("parameter", "output", "constant")
"""The kinds of allocation held for the whole program."""

Platform = Literal["cpu", "gpu", "tpu"]

PEAK_RULES: dict[str, str] = {
    "tpu": (
        "libtpu's own peak, memory_analysis().peak_memory_in_bytes: the parameters, "
        "outputs and constants, and over them the larger of the HBM temporaries live at "
        "once at their most and its VMEM block"
    ),
    "gpu": (
        "XLA:GPU's own peak, memory_analysis().peak_memory_in_bytes: the arguments, "
        "outputs and constants, and the temporaries live at once at their most (their "
        "bytes added up, not the height of the block that holds them)"
    ),
    "cpu": (
        "memory_analysis().peak_memory_in_bytes + temp_size_in_bytes: the CPU's own peak "
        "counts the arguments, outputs and constants, and leaves out its block of "
        "temporaries, which it reserves whole"
    ),
}
"""The one peak of a compiled program, per platform: what the run page, the memory page,
"Does it fit?", the CLI and the MCP tools show."""


def platform_of(path: str | None) -> Platform:
    """The platform whose rule gives a run's peak, from its path (`jax-tpu`, `jax-gpu`;
    any other is the host's CPU)."""
    return {"jax-tpu": "tpu", "jax-gpu": "gpu"}.get(path or "", "cpu")  # type: ignore[return-value]


def program_peak(platform: Platform, *, peak: int | None, temp: int | None) -> int | None:
    """The program's peak from memory_analysis() by its platform's rule (PEAK_RULES);
    None where the compiler reports too little."""
    if peak is None:
        return None
    if platform == "cpu":
        return None if temp is None else peak + temp
    return peak


def live_at_peak_bytes(report: MemoryReport) -> int:
    """Bytes of the peak the buffers hold, the ones counted in `other` included."""
    return sum(b.held for b in report.buffers) + report.other.live_at_peak_bytes


def _counts(report: MemoryReport) -> list[int]:
    figures = [report.peak_bytes, report.peak_step, report.steps, report.padding_bytes]
    figures += [report.unattributed_bytes, *report.by_kind.values(), *report.allocated.values()]
    figures += list(report.not_counted.values())
    figures += [report.other.count, report.other.bytes]
    figures += [report.other.live_at_peak_count, report.other.live_at_peak_bytes]
    for b in report.buffers:
        figures += [b.bytes, b.allocation, b.offset, *b.live]
        figures += [x for x in (b.logical_bytes, b.held_bytes) if x is not None]
    for k in report.blocks:
        figures += [k.bytes, k.live_bytes, k.counted_bytes, k.memory_space]
    figures += [x for point in report.timeline for x in point]
    return figures


def report_problem(report: MemoryReport) -> str | None:
    """Why the server would not publish `report` (its figures disagree among themselves),
    or None when it holds together."""
    if any(x < 0 for x in _counts(report)):
        return "a negative figure"
    too_many = len(report.buffers) > MAX_BUFFERS or len(report.blocks) > MAX_BLOCKS
    if too_many or len(report.timeline) > MAX_TIMELINE:
        return "more buffers, blocks or curve points than a report may carry"
    if any(len(b.live) != 2 or b.live[0] > b.live[1] for b in report.buffers):
        return "a live range that ends before it starts"
    if any(b.held > b.bytes for b in report.buffers):
        return "a buffer that holds more of the peak than its own bytes"
    if any(len(p) != 2 for p in report.timeline):
        return "a curve point that is not [step, bytes]"
    curve = {p[0]: p[1] for p in report.timeline}
    if report.timeline and (max(curve.values()) != report.peak_bytes):
        return "the curve's maximum is not the peak"
    if report.timeline and curve.get(report.peak_step) != report.peak_bytes:
        return "the curve does not reach the peak at peak_step"
    counted = sum(k.counted_bytes for k in report.blocks)
    if live_at_peak_bytes(report) + counted + report.unattributed_bytes != report.peak_bytes:
        return (
            "the buffers at the peak, the blocks counted whole and the unattributed bytes "
            "do not add up to it"
        )
    if sum(report.by_kind.values()) != live_at_peak_bytes(report):
        return "the bytes by kind do not add up to the buffers live at the peak"
    if any(k.live_bytes > k.bytes or k.counted_bytes > k.bytes for k in report.blocks):
        return "a block holds more at the peak than its own size"
    return None


def difference_of(report: MemoryReport, compared: int | None, rule: str) -> str | None:
    """Both figures and why they differ, where the report's peak is more than 1% from
    memory_analysis()'s; None where they agree (or there is nothing to compare)."""
    if not compared or abs(report.peak_bytes - compared) <= PEAK_TOLERANCE * compared:
        return None
    return (
        f"the buffer assignment's peak ({report.peak_bytes:,} bytes) is "
        f"{(report.peak_bytes - compared) / compared:+.1%} from the compiler's figure "
        f"({compared:,} bytes: {rule}). Both come from the same compile; the buffers "
        "listed add up to the first, and the compiler counts the second by its own rule"
    )


def _cut(text: str | None, most: int = 400) -> str | None:
    return text[:most] if text is not None else None


def _capped(b: MemoryBuffer) -> MemoryBuffer:
    return b.model_copy(
        update={
            "instructions": [i[:200] for i in b.instructions[:16]],
            "shape": b.shape[:400],
            "layout": _cut(b.layout, 200),
            "op_name": _cut(b.op_name),
            "source": _cut(b.source),
            "library": _cut(b.library),
            "parameter_path": _cut(b.parameter_path),
        }
    )


def _capped_block(k: MemoryBlock) -> MemoryBlock:
    value = k.set_by
    if value is not None:
        value = value.model_copy(
            update={
                "instruction": value.instruction[:200],
                "op_name": _cut(value.op_name),
                "source": _cut(value.source),
            }
        )
    return k.model_copy(update={"name": k.name[:200], "why": k.why[:1000], "set_by": value})


def published_report(
    report: MemoryReport | None,
    *,
    platform: Platform,
    peak: int | None,
    temp: int | None,
) -> MemoryReport | None:
    """`report` as the server publishes it: its words capped, the figure it is compared
    with worked out again from memory_analysis() (`program_peak`), and, where the two are
    more than 1% apart, both with the reason (`difference`). Every figure is withheld, with
    the reason, only when the report does not add up among itself (`report_problem`).
    Applying it twice changes nothing."""
    if report is None:
        return None
    figure = program_peak(platform, peak=peak, temp=temp)
    rule = PEAK_RULES[platform]
    report = report.model_copy(
        update={
            "compared_bytes": figure,
            "compared_rule": rule,
            "difference": difference_of(report, figure, rule),
            "buffers": [_capped(b) for b in report.buffers],
            "blocks": [_capped_block(k) for k in report.blocks],
            "source": report.source[:400],
            "cost": report.cost[:400] if report.cost is not None else None,
        }
    )
    problem = report.withheld or report_problem(report)
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
