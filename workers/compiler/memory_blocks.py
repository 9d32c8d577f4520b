"""The blocks a compiler reserves whole, for the memory report: each heap of temporaries
and a TPU's VMEM, with what sets each one's size.

A heap block is as large as its highest value's top (offset + bytes). The compilers'
own peaks count the values live at once (libtpu and XLA:GPU), so a block can be taller
than its share of the peak: values live at other steps sit below its top value, and the
gaps between values at the peak's step are the difference. The block is named with the
value at its top, where that value sits and when it is live, beside the bytes its values
cover at the peak's step.

libtpu's own peak counts, over the parameters, outputs and constants, the larger of the
HBM temporaries live at once and its VMEM block (memory space 1): its size, the sum of
the space's allocations, not the values live in it. Found by comparing the two on every
program of bench/memory_adds_up.py and confirmed there on each run; where the block is
the larger it is a part of the peak of its own, counted whole. Pure Python.
"""

from __future__ import annotations

from workers.compiler.buffer_dump import Allocation, BufferDump
from workers.compiler.memory_slots import Slot, covered
from workers.protocol.memory import MAX_BLOCKS, MemoryBlock, MemoryValue

HEAP_WHY = (
    "The compiler reserves these temporaries as one block of {bytes:,} bytes; at the "
    "peak's step ({step:,}) the values live in it cover {live:,} bytes, listed among the "
    "buffers with their offsets. Its size is the top of {top}. {gap}"
)
TALLER = (
    "Values live at other steps sit below that top, so the block is {gap:,} bytes more "
    "than its values at the peak's step: memory_analysis()'s temp_size_in_bytes is the "
    "block, its peak counts the values."
)
FULL = "At the peak's step its values fill it."
TABLES_ONLY = (
    "The compiler reserves this block of {bytes:,} bytes for tuples' tables of pointers "
    "only, which libtpu leaves out of its peak (listed apart, not part of the peak)."
)
VMEM_WHY = (
    "libtpu's peak counts its VMEM block (memory space 1, the TensorCore's on-chip vector "
    "memory) in place of the HBM temporaries when the block is the larger: the block is "
    "{bytes:,} bytes, the HBM temporaries live at once {heap:,} at most, so {verdict}. "
    "Its size is the top of {top}."
)
VMEM_COUNTED = "the peak counts the block whole, and the temporaries are not part of it"
VMEM_NOT_COUNTED = "the peak counts the temporaries, and the block is not part of it"


def vmem_allocations(dump: BufferDump) -> list[Allocation]:
    """A TPU's VMEM block: the allocations of memory space 1."""
    return [a for a in dump.allocations if a.color == 1 and not a.thread_local]


def _value(slot: Slot) -> MemoryValue:
    return MemoryValue(
        instruction=slot.instructions[0],
        bytes=slot.size,
        offset=slot.offset,
        live=[slot.first, slot.last],
    )


def _top(slots: list[Slot]) -> Slot | None:
    """The value at a block's top: the highest top, a value over a tuple's table of
    pointers (a few bytes a compiler may place above everything)."""
    arrays = [s for s in slots if not s.shape.startswith("(")] or slots
    return max(arrays, key=lambda s: (s.top, s.size), default=None)


def _said(slot: Slot | None) -> str:
    if slot is None:
        return "no value"
    name = slot.instructions[0]
    return (
        f"{name} ({slot.size:,} bytes at offset {slot.offset:,}, "
        f"live at steps {slot.first:,}–{slot.last:,})"
    )


def _live(slots: list[Slot], step: int) -> int:
    return covered((s.offset, s.top) for s in slots if s.live_at(step))


def heap_blocks(allocations: list[Allocation], slots: list[Slot], step: int) -> list[MemoryBlock]:
    """Each heap block (an allocation of temporaries), biggest first: its size, the bytes
    its values cover at the peak's `step`, and the value that sets its size."""
    found: list[MemoryBlock] = []
    heaps = [a for a in allocations if a.kind not in ("parameter", "output", "constant")]
    for a in sorted(heaps, key=lambda a: -a.size)[: MAX_BLOCKS - 1]:
        mine = [s for s in slots if s.allocation == a.index]
        live = _live(mine, step)
        top = _top(mine)
        gap = max(a.size - live, 0)
        said = TALLER.format(gap=gap) if gap else FULL
        why = HEAP_WHY.format(bytes=a.size, step=step, live=live, top=_said(top), gap=said)
        if top is None:
            why = TABLES_ONLY.format(bytes=a.size)
        found.append(
            MemoryBlock(
                name=f"temporaries (allocation {a.index})",
                bytes=a.size,
                live_bytes=live,
                set_by=_value(top) if top is not None else None,
                why=why,
            )
        )
    return found


def vmem_block(slots: list[Slot], vmem: int, counted: bool, heap: int) -> MemoryBlock:
    """A TPU's VMEM block (`slots`: its values): counted whole in the peak where it passes
    the HBM temporaries live at the peak's step (`heap` bytes)."""
    top = _top(slots)
    verdict = VMEM_COUNTED if counted else VMEM_NOT_COUNTED
    return MemoryBlock(
        name="VMEM",
        memory_space=1,
        bytes=vmem,
        counted_bytes=vmem if counted else 0,
        set_by=_value(top) if top is not None else None,
        why=VMEM_WHY.format(bytes=vmem, heap=heap, verdict=verdict, top=_said(top)),
    )
