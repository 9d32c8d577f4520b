"""The values of a buffer assignment as slots (where each sits, when it is live), the live
bytes of the heap blocks at each step, the step of the peak, and which slots hold the
peak's bytes there.

A heap block's live bytes at a step are the bytes its live values cover, each byte once:
two values share bytes where one is handed on in place (the value read ends at the step
that writes the other). Counted so, the maximum over the schedule is the figure the
compilers give as their own peak (`memory_analysis().peak_memory_in_bytes` of libtpu and
XLA:GPU, and the CPU's temporaries' block): the values added up, not the block's height,
which also holds gaps between values placed for other steps.

At the peak's step every parameter, output and constant holds its bytes (reserved for the
whole program) and every value live then holds its own. Each byte is given to one slot:
the value live at the step before a reserved one not live yet, the one written at the step
before the one it was made from; a slot holds what is left of its bytes (`Slot.held`), so a
reserved output lent to a temporary keeps the bytes the temporary does not use, and the
slots at the peak add up to it. `workers.compiler.memory_report` builds the report on
these. Pure Python.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, replace

from workers.protocol.memory import MemoryKind


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
    held: int = 0
    """Bytes of the peak it holds at the peak's step (`attribute_peak`); 0: none."""

    @property
    def at_peak(self) -> bool:
        return self.held > 0

    @property
    def top(self) -> int:
        return self.offset + self.size

    def live_at(self, step: int) -> bool:
        return self.first <= step <= self.last


def covered(spans: Iterable[tuple[int, int]]) -> int:
    """Bytes covered by the (start, end) spans, each byte once."""
    covered, reach = 0, -1
    for start, end in sorted(spans):
        if end <= reach:
            continue
        covered += end - max(start, reach)
        reach = end
    return covered


def _shared_steps(slots: list[Slot]) -> dict[int, set[int]]:
    """Per allocation, the steps at which two of its live values share bytes: a sweep in
    order of first step, each value set against the values still live in its allocation."""
    shared: dict[int, set[int]] = {}
    live: dict[int, list[Slot]] = {}
    for s in sorted(slots, key=lambda s: (s.first, s.offset)):
        mine = [t for t in live.get(s.allocation, []) if t.last >= s.first]
        for t in mine:
            if t.offset < s.top and s.offset < t.top:
                shared.setdefault(s.allocation, set()).update(
                    range(s.first, min(s.last, t.last) + 1)
                )
        live[s.allocation] = [*mine, s]
    return shared


def heap_live(slots: list[Slot], steps: int) -> tuple[list[int], set[int]]:
    """The heap blocks' live bytes at each step (each byte once, module docstring), and
    the steps at which some values share bytes."""
    delta = [0] * (steps + 1)
    for s in slots:
        delta[s.first] += s.size
        delta[s.last + 1] -= s.size
    live, running = [0] * steps, 0
    for step in range(steps):
        running += delta[step]
        live[step] = running
    shared = _shared_steps(slots)
    for allocation, at in shared.items():
        mine = sorted((s for s in slots if s.allocation == allocation), key=lambda s: s.first)
        active: list[tuple[int, int, Slot]] = []  # (last, tie, slot): a min-heap by last
        j = 0
        for step in sorted(at):
            while j < len(mine) and mine[j].first <= step:
                heapq.heappush(active, (mine[j].last, j, mine[j]))
                j += 1
            while active and active[0][0] < step:
                heapq.heappop(active)
            values = [s for _, _, s in active if s.live_at(step)]
            live[step] -= sum(s.size for s in values) - covered((s.offset, s.top) for s in values)
    return live, {step for at in shared.values() for step in at}


def peak_step_of(curve: list[int], shared: set[int]) -> int:
    """The first step at the curve's maximum where no two live values share bytes, or the
    first at it (each byte is counted once either way)."""
    peak = max(curve)
    at = [step for step, b in enumerate(curve) if b == peak]
    return next((step for step in at if step not in shared), at[0])


def _uncovered(start: int, end: int, given: list[tuple[int, int]]) -> int:
    """Bytes of [start, end) that no span in `given` covers."""
    inside = [(max(a, start), min(b, end)) for a, b in given if a < end and start < b]
    return (end - start) - covered(inside)


def attribute_peak(
    slots: list[Slot], step: int, skipped: frozenset[int] = frozenset()
) -> list[Slot]:
    """Every slot, those holding the peak's bytes at `step` with `held` set (module
    docstring): in each allocation the values live then first, the one written latest
    first, then the reserved ones, each given the bytes no slot before it took. The
    allocations `skipped` hold none of the peak (a TPU's heap blocks where its VMEM block
    is counted in their place)."""
    by_allocation: dict[int, list[Slot]] = {}
    for s in slots:
        if s.allocation not in skipped and (s.reserved or s.live_at(step)):
            by_allocation.setdefault(s.allocation, []).append(s)
    held: dict[int, int] = {}
    for mine in by_allocation.values():
        given: list[tuple[int, int]] = []
        for s in sorted(mine, key=lambda s: (not s.live_at(step), -s.first, -s.size, s.offset)):
            held[id(s)] = _uncovered(s.offset, s.top, given)
            given.append((s.offset, s.top))
    return [replace(s, held=held[id(s)]) if held.get(id(s)) else s for s in slots]
