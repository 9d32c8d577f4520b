"""A compiled run's memory report, from the compiler's own buffer assignment.

`workers.compiler.buffer_dump` reads what XLA planned (allocations, the values in them,
each value's live range over the schedule); this module turns it into the report the
run carries (`workers.protocol.memory.MemoryReport`):

- the live-bytes curve: at each step, the parameters, outputs and constants (reserved for
  the whole program), plus for each heap block the highest offset + size among the
  values live in it then. Its maximum is the peak; `peak_step` the first step at it;
- the buffers: one per value, values that share bytes while live merged into one (an
  in-place update, a loop's carried state), each with its kind, defining instructions,
  shape and layout, logical bytes beside the allocated ones, op name and source line;
- what is live at the peak, by kind, its padding, and the bytes no live value holds then.

Only the device's main memory (colour 0) counts; other memory spaces (TPU VMEM and
SMEM, host memory) are totalled apart. Thread-local scalars of reducers are no device
memory. Pure Python, no jax.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from workers.compiler.buffer_dump import Allocation, AssignedValue, BufferDump
from workers.compiler.hlo_origins import instruction_origins
from workers.protocol.hlo import shape_bytes
from workers.protocol.memory import (
    KINDS,
    MAX_BUFFERS,
    MAX_TIMELINE,
    MemoryBuffer,
    MemoryKind,
    MemoryOther,
    MemoryReport,
)

FLAT_KINDS = ("parameter", "output", "constant")
"""Allocations reserved for the whole program: the caller's arguments, the results the
runtime allocates before the program starts, the executable's constants."""


@dataclass(frozen=True)
class Slot:
    """One buffer before it is published: where it sits and when it is live."""

    allocation: int
    offset: int
    size: int
    first: int
    last: int
    kind: MemoryKind
    instructions: tuple[str, ...]
    shape: str
    reserved: bool = False
    """A parameter, output or constant in its own allocation: its bytes are held for the
    whole program (the runtime reserves an output's buffer before the program starts)."""

    def live_at(self, step: int) -> bool:
        return self.first <= step <= self.last

    def held_at(self, step: int) -> bool:
        """Whether it holds bytes of the heap at `step`: live then, or reserved."""
        return self.reserved or self.live_at(step)


def device_allocations(dump: BufferDump) -> list[Allocation]:
    """The allocations in the device's main memory."""
    return [a for a in dump.allocations if not a.thread_local and a.color == 0]


def heap_tuple(allocation: Allocation, value: AssignedValue) -> bool:
    """A tuple's table of pointers inside a heap block: a few bytes each, left out of the
    curve and the buffers (libtpu leaves them out of its own peak too, and places them
    above everything else, where they would set the heap's high water alone)."""
    return allocation.kind not in FLAT_KINDS and value.shape.startswith("(")


def not_counted(dump: BufferDump) -> dict[str, int]:
    """Bytes the compiler placed that are not part of the peak: other memory spaces (by
    colour) and the tuple tables of heap blocks."""
    apart: dict[str, int] = {}
    for a in dump.allocations:
        if a.thread_local:
            continue
        if a.color != 0:
            apart[f"color {a.color}"] = apart.get(f"color {a.color}", 0) + a.size
            continue
        tables = sum(v.size for v in a.values if heap_tuple(a, v))
        if tables:
            apart["tuple tables"] = apart.get("tuple tables", 0) + tables
    return apart


def _high_water(spans: list[tuple[int, int, int]], steps: int) -> list[int]:
    """Per step, the highest top (offset + size) among the spans (first, last, top) live
    then: a sweep over the steps with a max-heap whose expired tops are dropped lazily."""
    spans = sorted(spans)
    heap: list[tuple[int, int]] = []
    out = [0] * steps
    j = 0
    for step in range(steps):
        while j < len(spans) and spans[j][0] <= step:
            heapq.heappush(heap, (-spans[j][2], spans[j][1]))
            j += 1
        while heap and heap[0][1] < step:
            heapq.heappop(heap)
        out[step] = -heap[0][0] if heap else 0
    return out


def _span(dump: BufferDump, key: str, instruction: str, order: dict[str, int]) -> tuple[int, int]:
    found = dump.ranges.get(key)
    if found is not None:
        return found
    at = order.get(instruction)
    return (at, at) if at is not None else (0, len(dump.sequence) - 1)


def _value_kind(allocation: Allocation, first: int, last: int, end: int, start: int) -> MemoryKind:
    """A value's kind: its allocation's, except that a value only passing through a
    parameter's or an output's allocation (live neither from its start nor to the end)
    is a temporary."""
    kind: MemoryKind = allocation.kind  # type: ignore[assignment]
    if kind == "parameter" and first != start:
        return "output" if last == end else "temporary"
    if kind == "output" and last != end:
        return "temporary"
    return kind


def slots_of(dump: BufferDump, allocations: list[Allocation]) -> list[Slot]:
    """Every value of `allocations` as a slot, with its live range and kind."""
    order = {name: i for i, name in enumerate(dump.sequence)}
    end = len(dump.sequence) - 1
    slots: list[Slot] = []
    for a in allocations:
        counted = [v for v in a.values if not heap_tuple(a, v)]
        spans = [_span(dump, v.key, v.instruction, order) for v in counted]
        start = min((s[0] for s in spans), default=0)
        for v, (first, last) in zip(counted, spans, strict=True):
            kind = _value_kind(a, first, last, end, start)
            reserved = a.kind in FLAT_KINDS and kind != "temporary"
            slots.append(
                Slot(
                    a.index, v.offset, v.size, first, last, kind, (v.instruction,), v.shape,
                    reserved,
                )
            )  # fmt: skip
    return slots


def _merged(group: list[Slot]) -> Slot:
    top = max(s.offset + s.size for s in group)
    offset = min(s.offset for s in group)
    biggest = max(group, key=lambda s: s.size)
    ordered = sorted(group, key=lambda s: s.first)
    names = tuple(dict.fromkeys(n for s in ordered for n in s.instructions))
    return replace(
        biggest,
        offset=offset,
        size=top - offset,
        first=min(s.first for s in group),
        last=max(s.last for s in group),
        instructions=names,
        reserved=any(s.reserved for s in group),
    )


def merge_shared(slots: list[Slot], peak_step: int) -> list[Slot]:
    """Slots that hold the same bytes while both are live, as one: first the same slot
    handed on (an in-place update), then any overlap among the slots that hold bytes at
    the peak (a temporary lent an output's reserved buffer), so that each byte of the
    peak is counted once."""
    by_place: dict[tuple[int, int, int], list[Slot]] = {}
    for s in slots:
        by_place.setdefault((s.allocation, s.offset, s.size), []).append(s)
    chained: list[Slot] = []
    for group in by_place.values():
        run: list[Slot] = []
        for s in sorted(group, key=lambda s: s.first):
            if run and s.first > max(r.last for r in run):
                chained.append(_merged(run) if len(run) > 1 else run[0])
                run = []
            run.append(s)
        chained.append(_merged(run) if len(run) > 1 else run[0])
    live = sorted(
        (s for s in chained if s.held_at(peak_step)), key=lambda s: (s.allocation, s.offset)
    )
    rest = [s for s in chained if not s.held_at(peak_step)]
    out: list[Slot] = []
    run = []
    for s in live:
        top = max((r.offset + r.size for r in run), default=0)
        if run and (s.allocation != run[0].allocation or s.offset >= top):
            out.append(_merged(run) if len(run) > 1 else run[0])
            run = []
        run.append(s)
    if run:
        out.append(_merged(run) if len(run) > 1 else run[0])
    return out + rest


def live_curve(dump: BufferDump, allocations: list[Allocation]) -> list[int]:
    """The live bytes at each step of the schedule (module docstring)."""
    steps = len(dump.sequence)
    flat = sum(a.size for a in allocations if a.kind in FLAT_KINDS)
    curve = [flat] * steps
    order = {name: i for i, name in enumerate(dump.sequence)}
    for a in allocations:
        if a.kind in FLAT_KINDS:
            continue
        spans = [
            (*_span(dump, v.key, v.instruction, order), v.offset + v.size)
            for v in a.values
            if not heap_tuple(a, v)
        ]
        for step, top in enumerate(_high_water(spans, steps)):
            curve[step] += top
    return curve


def peak_step_of(curve: list[int], slots: list[Slot]) -> int:
    """Of the steps at the curve's maximum, the first at which live buffers hold the most
    bytes. The heap's high water is often first reached by a small value placed above a
    large block that is not live yet: a step that explains little of the peak."""
    peak = max(curve)
    held = [0] * (len(curve) + 1)
    for s in slots:
        first, last = (0, len(curve) - 1) if s.reserved else (s.first, s.last)
        held[first] += s.size
        held[last + 1] -= s.size
    best, best_held, running = curve.index(peak), -1, 0
    for step, bytes_ in enumerate(curve):
        running += held[step]
        if bytes_ == peak and running > best_held:
            best, best_held = step, running
    return best


def thinned(curve: list[int], peak_step: int, most: int = MAX_TIMELINE) -> list[list[int]]:
    """At most `most` points of the curve: each stretch's highest (its first step at it),
    so that no peak is flattened and `peak_step` is always among them."""
    if len(curve) <= most:
        return [[i, b] for i, b in enumerate(curve)]
    width = -(-len(curve) // most)
    points: list[list[int]] = []
    for start in range(0, len(curve), width):
        stretch = curve[start : start + width]
        top = max(stretch)
        points.append([start + stretch.index(top), top])
    assert any(p[0] == peak_step for p in points)
    return points


def split_shape(text: str) -> tuple[str, str | None]:
    """`bf16[8,128]{1,0:T(8,128)(2,1)}` → (`bf16[8,128]`, `{1,0:T(8,128)(2,1)}`); a tuple
    shape is kept whole, with no layout."""
    if text.startswith("("):
        return text, None
    brace = text.find("{")
    return (text, None) if brace < 0 else (text[:brace], text[brace:])


Origins = dict[str, tuple[str | None, str | None]]


def published_buffer(slot: Slot, peak_step: int, origins: Origins) -> MemoryBuffer:
    shape, layout = split_shape(slot.shape)
    logical = shape_bytes(shape) if layout is not None or not shape.startswith("(") else None
    named = [origins[n] for n in slot.instructions if n in origins]
    return MemoryBuffer(
        bytes=slot.size,
        logical_bytes=logical,
        kind=slot.kind,
        instructions=list(slot.instructions),
        shape=shape,
        layout=layout,
        op_name=next((o for o, _ in named if o), None),
        source=next((s for _, s in named if s), None),
        live=[slot.first, slot.last],
        live_at_peak=slot.held_at(peak_step),
        allocation=slot.allocation,
        offset=slot.offset,
    )


def padding_of(buffer: MemoryBuffer) -> int:
    return max(buffer.bytes - buffer.logical_bytes, 0) if buffer.logical_bytes is not None else 0


def memory_report(
    dump: BufferDump, hlo: str | None, *, source: str, on_chip: bool = False
) -> MemoryReport:
    """The report of one compiled program (module docstring); `hlo` is its optimized
    module as the run shows it, for op names and source lines; `on_chip`: a TPU's, whose
    memory space 1 (VMEM) has its own peak."""
    allocations = device_allocations(dump)
    curve = live_curve(dump, allocations)
    peak = max(curve)
    values = slots_of(dump, allocations)
    peak_step = peak_step_of(curve, values)
    slots = merge_shared(values, peak_step)
    slots.sort(key=lambda s: (not s.held_at(peak_step), -s.size, s.allocation, s.offset))
    shown, rest = slots[:MAX_BUFFERS], slots[MAX_BUFFERS:]
    wanted = {n for s in shown for n in s.instructions}
    found = instruction_origins(hlo, wanted) if hlo else {}
    origins = {k: (o.op_name, o.source) for k, o in found.items()}
    buffers = [published_buffer(s, peak_step, origins) for s in shown]
    buffers.sort(key=lambda b: (-b.bytes, b.allocation, b.offset))
    at_peak = [s for s in slots if s.held_at(peak_step)]
    by_kind = {k: sum(s.size for s in at_peak if s.kind == k) for k in KINDS}
    allocated: dict[str, int] = {}
    for a in allocations:
        allocated[a.kind] = allocated.get(a.kind, 0) + a.size
    rest_live = [s for s in rest if s.held_at(peak_step)]
    padding = sum(padding_of(b) for b in buffers if b.live_at_peak)
    padding += sum(padding_of(published_buffer(s, peak_step, {})) for s in rest_live)
    return MemoryReport(
        peak_bytes=peak,
        peak_step=peak_step,
        steps=len(curve),
        by_kind=by_kind,
        padding_bytes=padding,
        unattributed_bytes=peak - sum(s.size for s in at_peak),
        allocated=allocated,
        buffers=buffers,
        other=MemoryOther(
            count=len(rest),
            bytes=sum(s.size for s in rest),
            live_at_peak_count=len(rest_live),
            live_at_peak_bytes=sum(s.size for s in rest_live),
        ),
        timeline=thinned(curve, peak_step),
        not_counted=not_counted(dump),
        on_chip_peak_bytes=vmem_peak(dump) if on_chip else None,
        source=source,
    )


def vmem_peak(dump: BufferDump) -> int | None:
    """The most bytes live at once in memory space 1 (a TPU's VMEM), values added up as
    libtpu adds them for its own peak (no gaps between them counted)."""
    vmem = [a for a in dump.allocations if a.color == 1 and not a.thread_local]
    if not vmem:
        return None
    steps = len(dump.sequence)
    live = [0] * (steps + 1)
    for s in slots_of(dump, vmem):
        live[s.first] += s.size
        live[s.last + 1] -= s.size
    most = running = 0
    for delta in live[:steps]:
        running += delta
        most = max(most, running)
    return most
