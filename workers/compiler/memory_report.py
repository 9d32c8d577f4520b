"""A compiled run's memory report, from the compiler's own buffer assignment.

`workers.compiler.buffer_dump` reads what XLA planned (allocations, the values in them,
each value's live range over the schedule); this module turns it into the report the
run carries (`workers.protocol.memory.MemoryReport`):

- the live-bytes curve: at each step, the parameters, outputs and constants (reserved for
  the whole program), plus for each heap block the highest offset + size among the
  values live in it then. Its maximum is the peak; `peak_step` the step at it that
  explains it best (`workers.compiler.memory_slots`);
- the buffers: one per value, each with its kind, defining instruction, shape and
  layout, logical bytes beside the allocated ones, op name and source line;
- what holds the peak, by kind (each byte given to one buffer), its padding, and the
  bytes no buffer holds then.

Only the device's main memory (colour 0) counts; other memory spaces (TPU VMEM and
SMEM, host memory) are totalled apart. Thread-local scalars of reducers are no device
memory. Pure Python, no jax.
"""

from __future__ import annotations

import heapq

from workers.compiler.buffer_dump import Allocation, AssignedValue, BufferDump
from workers.compiler.memory_slots import Slot, attribute_peak, peak_step_of
from workers.protocol.hlo import read_hlo, shape_bytes
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


def device_allocations(dump: BufferDump) -> list[Allocation]:
    """The allocations in the device's main memory."""
    return [a for a in dump.allocations if not a.thread_local and a.color == 0]


def heap_tuple(allocation: Allocation, value: AssignedValue, tpu: bool) -> bool:
    """On a TPU, a tuple's table of pointers inside a heap block: a few bytes each, left
    out of the curve and the buffers (libtpu leaves them out of its own peak too, and
    places them above everything else, where they would set the heap's high water alone).
    Elsewhere they are values like any other."""
    return tpu and allocation.kind not in FLAT_KINDS and value.shape.startswith("(")


def not_counted(dump: BufferDump, tpu: bool) -> dict[str, int]:
    """Bytes the compiler placed that are not part of the peak: other memory spaces (by
    colour) and the tuple tables of heap blocks."""
    apart: dict[str, int] = {}
    for a in dump.allocations:
        if a.thread_local:
            continue
        if a.color != 0:
            apart[f"color {a.color}"] = apart.get(f"color {a.color}", 0) + a.size
            continue
        tables = sum(v.size for v in a.values if heap_tuple(a, v, tpu))
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


def slots_of(dump: BufferDump, allocations: list[Allocation], tpu: bool) -> list[Slot]:
    """Every value of `allocations` as a slot, with its live range and kind."""
    order = {name: i for i, name in enumerate(dump.sequence)}
    end = len(dump.sequence) - 1
    slots: list[Slot] = []
    for a in allocations:
        counted = [v for v in a.values if not heap_tuple(a, v, tpu)]
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


def live_curve(dump: BufferDump, allocations: list[Allocation], tpu: bool) -> list[int]:
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
            if not heap_tuple(a, v, tpu)
        ]
        for step, top in enumerate(_high_water(spans, steps)):
            curve[step] += top
    return curve


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
"""Each instruction's JAX operation and the user's innermost source line, `file:line`."""


def origins_of(hlo: str, wanted: set[str]) -> Origins:
    """The origins of the instructions `wanted` that the module `hlo` defines, read by the
    one HLO reader (its `Instruction.user_frame` is the user's own innermost frame)."""
    module = read_hlo(hlo)
    found: Origins = {}
    for name in wanted:
        ins = module.by_name.get(name)
        if ins is not None:
            user = ins.user_frame
            found[name] = (ins.op_name, f"{user.file}:{user.line}" if user else None)
    return found


def published_buffer(slot: Slot, origins: Origins) -> MemoryBuffer:
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
        live_at_peak=slot.at_peak,
        allocation=slot.allocation,
        offset=slot.offset,
    )


def padding_of(buffer: MemoryBuffer) -> int:
    return max(buffer.bytes - buffer.logical_bytes, 0) if buffer.logical_bytes is not None else 0


def memory_report(
    dump: BufferDump, hlo: str | None, *, source: str, tpu: bool = False
) -> MemoryReport:
    """The report of one compiled program (module docstring); `hlo` is its optimized
    module as the run shows it, for op names and source lines; `tpu`: a TPU's, whose
    memory space 1 (VMEM) has its own peak and whose tuple tables are left out."""
    allocations = device_allocations(dump)
    curve = live_curve(dump, allocations, tpu)
    peak = max(curve)
    values = slots_of(dump, allocations, tpu)
    peak_step = peak_step_of(curve, values)
    slots = attribute_peak(values, peak_step)
    slots.sort(key=lambda s: (not s.at_peak, -s.size, s.allocation, s.offset))
    shown, rest = slots[:MAX_BUFFERS], slots[MAX_BUFFERS:]
    wanted = {n for s in shown for n in s.instructions}
    origins = origins_of(hlo, wanted) if hlo else {}
    buffers = [published_buffer(s, origins) for s in shown]
    buffers.sort(key=lambda b: (-b.bytes, b.allocation, b.offset))
    at_peak = [s for s in slots if s.at_peak]
    allocated: dict[str, int] = {}
    for a in allocations:
        allocated[a.kind] = allocated.get(a.kind, 0) + a.size
    rest_live = [s for s in rest if s.at_peak]
    padding = sum(padding_of(b) for b in buffers if b.live_at_peak)
    padding += sum(padding_of(published_buffer(s, {})) for s in rest_live)
    return MemoryReport(
        peak_bytes=peak,
        peak_step=peak_step,
        steps=len(curve),
        by_kind={k: sum(s.size for s in at_peak if s.kind == k) for k in KINDS},
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
        not_counted=not_counted(dump, tpu),
        on_chip_peak_bytes=vmem_peak(dump, tpu) if tpu else None,
        source=source,
    )


def vmem_peak(dump: BufferDump, tpu: bool = True) -> int | None:
    """The most bytes live at once in memory space 1 (a TPU's VMEM), values added up as
    libtpu adds them for its own peak (no gaps between them counted)."""
    vmem = [a for a in dump.allocations if a.color == 1 and not a.thread_local]
    if not vmem:
        return None
    steps = len(dump.sequence)
    live = [0] * (steps + 1)
    for s in slots_of(dump, vmem, tpu):
        live[s.first] += s.size
        live[s.last + 1] -= s.size
    most = running = 0
    for delta in live[:steps]:
        running += delta
        most = max(most, running)
    return most
