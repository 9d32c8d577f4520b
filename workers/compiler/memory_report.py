"""A compiled run's memory report, from the compiler's own buffer assignment.

`workers.compiler.buffer_dump` reads what XLA planned (allocations, the values in them,
each value's live range over the schedule); this module turns it into the report the
run carries (`workers.protocol.memory.MemoryReport`):

- the live-bytes curve: at each step, the parameters, outputs and constants (reserved for
  the whole program), plus the bytes the heap blocks' live values cover then, each byte
  once (`workers.compiler.memory_slots.heap_live`); on a TPU, the larger of those and the
  VMEM block, as libtpu counts its own peak. Its maximum is the peak, the figure of
  `memory_analysis()` by its platform's rule; `peak_step` the step it is read at;
- the buffers: one per value, each with its kind, defining instruction, shape and
  layout, logical bytes beside the allocated ones, op name, the user's source line and
  the library's beside it, a parameter's pytree path, and the bytes of the peak it holds;
- what holds the peak, by kind, its padding, the blocks reserved whole and what sets
  their size (`workers.compiler.memory_blocks`), and the bytes no value covers.

Only the device's main memory (colour 0) holds buffers; other memory spaces (TPU VMEM and
SMEM, host memory) are a block (VMEM) or totalled apart. Thread-local scalars of reducers
are no device memory. Pure Python, no jax.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.compiler.buffer_dump import Allocation, AssignedValue, BufferDump
from workers.compiler.memory_blocks import heap_blocks, vmem_allocations, vmem_block
from workers.compiler.memory_slots import Slot, attribute_peak, heap_live, peak_step_of
from workers.protocol.hlo import read_hlo, shape_bytes
from workers.protocol.memory import (
    KINDS,
    MAX_BUFFERS,
    MAX_TIMELINE,
    MemoryBuffer,
    MemoryKind,
    MemoryOther,
    MemoryReport,
    MemoryValue,
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
    places them above everything else). Elsewhere they are values like any other."""
    return tpu and allocation.kind not in FLAT_KINDS and value.shape.startswith("(")


def not_counted(dump: BufferDump, tpu: bool) -> dict[str, int]:
    """Bytes the compiler placed that are not part of the peak: other memory spaces (by
    colour; a TPU's VMEM is a block of its own) and the tuple tables of heap blocks."""
    apart: dict[str, int] = {}
    for a in dump.allocations:
        if a.thread_local or (tpu and a.color == 1):
            continue
        if a.color != 0:
            apart[f"color {a.color}"] = apart.get(f"color {a.color}", 0) + a.size
            continue
        tables = sum(v.size for v in a.values if heap_tuple(a, v, tpu))
        if tables:
            apart["tuple tables"] = apart.get("tuple tables", 0) + tables
    return apart


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
        at = start + stretch.index(top)
        if start <= peak_step < start + width and curve[peak_step] == top:
            at = peak_step
        points.append([at, top])
    return points


def split_shape(text: str) -> tuple[str, str | None]:
    """`bf16[8,128]{1,0:T(8,128)(2,1)}` → (`bf16[8,128]`, `{1,0:T(8,128)(2,1)}`); a tuple
    shape is kept whole, with no layout."""
    if text.startswith("("):
        return text, None
    brace = text.find("{")
    return (text, None) if brace < 0 else (text[:brace], text[brace:])


@dataclass(frozen=True)
class Origin:
    """Where an instruction came from: its JAX operation, the user's innermost line and
    the library's inside it (`file:line`), and, for an entry parameter, its pytree path."""

    op_name: str | None
    source: str | None
    library: str | None
    parameter_path: str | None


Origins = dict[str, Origin]


def origins_of(hlo: str, wanted: set[str]) -> Origins:
    """The origins of the instructions `wanted` that the module `hlo` defines, read by the
    one HLO reader (`Instruction.source`: the user's own frame and the library's)."""
    module = read_hlo(hlo)
    found: Origins = {}
    for name in wanted:
        ins = module.by_name.get(name)
        if ins is None:
            continue
        user = ins.source.user if ins.source else None
        library = ins.source.library if ins.source else None
        found[name] = Origin(
            ins.op_name,
            f"{user.file}:{user.line}" if user else None,
            f"{library.file}:{library.line}" if library else None,
            ins.parameter_path,
        )
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
        op_name=next((o.op_name for o in named if o.op_name), None),
        source=next((o.source for o in named if o.source), None),
        library=next((o.library for o in named if o.library), None),
        parameter_path=next((o.parameter_path for o in named if o.parameter_path), None),
        live=[slot.first, slot.last],
        live_at_peak=slot.at_peak,
        held_bytes=slot.held if slot.at_peak else None,
        allocation=slot.allocation,
        offset=slot.offset,
    )


def padding_of(slot: Slot) -> int:
    """Allocated minus logical bytes of a value (a tuple, a table of pointers, has none)."""
    shape, layout = split_shape(slot.shape)
    if layout is None and shape.startswith("("):
        return 0
    logical = shape_bytes(shape)
    return max(slot.size - logical, 0) if logical is not None else 0


def memory_report(
    dump: BufferDump, hlo: str | None, *, source: str, tpu: bool = False
) -> MemoryReport:
    """The report of one compiled program (module docstring); `hlo` is its optimized
    module as the run shows it, for op names, source lines and parameter paths; `tpu`: a
    TPU's, whose VMEM block libtpu counts in its peak and whose tuple tables it leaves out."""
    allocations = device_allocations(dump)
    values = slots_of(dump, allocations, tpu)
    heap_ids = frozenset(a.index for a in allocations if a.kind not in FLAT_KINDS)
    heap, shared = heap_live([s for s in values if s.allocation in heap_ids], len(dump.sequence))
    flat = sum(a.size for a in allocations if a.kind in FLAT_KINDS)
    spaces = vmem_allocations(dump) if tpu else []
    vmem = sum(a.size for a in spaces)
    curve = [flat + max(h, vmem) for h in heap]
    step = peak_step_of(heap, shared)
    vmem_counted = vmem > heap[step]
    slots = attribute_peak(values, step, heap_ids if vmem_counted else frozenset())
    slots.sort(key=lambda s: (not s.at_peak, -s.size, s.allocation, s.offset))
    shown, rest = slots[:MAX_BUFFERS], slots[MAX_BUFFERS:]
    blocks = heap_blocks(allocations, slots, step)
    if vmem:
        blocks.append(vmem_block(slots_of(dump, spaces, tpu), vmem, vmem_counted, heap[step]))
    wanted = {n for s in shown for n in s.instructions}
    wanted |= {k.set_by.instruction for k in blocks if k.set_by is not None}
    origins = origins_of(hlo, wanted) if hlo else {}
    buffers = [published_buffer(s, origins) for s in shown]
    buffers.sort(key=lambda b: (-b.bytes, b.allocation, b.offset))
    at_peak = [s for s in slots if s.at_peak]
    allocated: dict[str, int] = {}
    for a in allocations:
        allocated[a.kind] = allocated.get(a.kind, 0) + a.size
    rest_live = [s for s in rest if s.at_peak]
    counted = vmem if vmem_counted else 0
    return MemoryReport(
        peak_bytes=max(curve),
        peak_step=step,
        steps=len(curve),
        by_kind={k: sum(s.held for s in at_peak if s.kind == k) for k in KINDS},
        padding_bytes=sum(padding_of(s) for s in at_peak),
        unattributed_bytes=max(curve) - sum(s.held for s in at_peak) - counted,
        allocated=allocated,
        blocks=[k.model_copy(update={"set_by": _named(k.set_by, origins)}) for k in blocks],
        buffers=buffers,
        other=MemoryOther(
            count=len(rest),
            bytes=sum(s.size for s in rest),
            live_at_peak_count=len(rest_live),
            live_at_peak_bytes=sum(s.held for s in rest_live),
        ),
        timeline=thinned(curve, step),
        not_counted=not_counted(dump, tpu),
        on_chip_peak_bytes=vmem or None,
        source=source,
    )


def _named(value: MemoryValue | None, origins: Origins) -> MemoryValue | None:
    """A block's `set_by` value with its op name and source line, where the HLO has them."""
    if value is None or value.instruction not in origins:
        return value
    origin = origins[value.instruction]
    return value.model_copy(update={"op_name": origin.op_name, "source": origin.source})
