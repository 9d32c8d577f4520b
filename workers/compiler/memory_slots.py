"""The values of a buffer assignment as slots (where each sits, when it is live), the step
that best explains the peak, and which slots hold the peak's bytes there.

At a step of the peak, every parameter, output and constant holds its bytes (reserved for
the whole program), and every value live then holds its own. Two of them can share bytes:
a value handed on in place (the one read ends at the step that writes the other), or a
temporary lent an output's buffer before the output is written. Each byte of the peak is
given to one of them, so the buffers at the peak add up to it and each names its own
instruction: the value live at the step over a reserved one not live yet, the one written
at the step over the one it was made from. `workers.compiler.memory_report` builds the
report on these. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workers.protocol.memory import MemoryKind

CANDIDATES = 64
"""Steps at the peak examined for the one that explains it best."""


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
    at_peak: bool = False
    """It holds bytes of the peak at the peak's step (`attribute_peak`)."""

    def live_at(self, step: int) -> bool:
        return self.first <= step <= self.last

    def held_at(self, step: int) -> bool:
        """Whether it holds bytes of the heap at `step`: live then, or reserved."""
        return self.reserved or self.live_at(step)


def held_runs(slots: list[Slot], step: int) -> list[list[Slot]]:
    """The slots holding bytes at `step`, grouped into runs that share bytes (sorted by
    allocation and offset; a run of one shares nothing)."""
    held = sorted((s for s in slots if s.held_at(step)), key=lambda s: (s.allocation, s.offset))
    runs: list[list[Slot]] = []
    for s in held:
        last = runs[-1] if runs else None
        if last and s.allocation == last[0].allocation and s.offset < _top(last):
            last.append(s)
        else:
            runs.append([s])
    return runs


def _top(run: list[Slot]) -> int:
    return max(s.offset + s.size for s in run)


def peak_step_of(curve: list[int], slots: list[Slot]) -> int:
    """Of the steps at the curve's maximum, the one whose held buffers cover most of the
    peak, and among those the one where fewest share bytes, the first on a tie. The
    heap's high water is often first reached by a small value placed above a large block
    that is not live yet: a step that explains little of the peak."""
    peak = max(curve)
    held = [0] * (len(curve) + 1)  # bytes held, shared ones twice: a cheap first order
    for s in slots:
        first, last = (0, len(curve) - 1) if s.reserved else (s.first, s.last)
        held[first] += s.size
        held[last + 1] -= s.size
    running, at_peak = 0, []
    for step, bytes_ in enumerate(curve):
        running += held[step]
        if bytes_ == peak:
            at_peak.append((-running, step))
    best: tuple[int, int, int] | None = None
    for _, step in sorted(at_peak)[:CANDIDATES]:
        runs = held_runs(slots, step)
        covered = sum(_top(run) - run[0].offset for run in runs)
        shared = sum(len(run) - 1 for run in runs)
        key = (covered, -shared, -step)
        if best is None or key > best:
            best = key
        if covered == peak and not shared:
            break
    assert best is not None
    return -best[2]


def _holders(run: list[Slot], step: int) -> list[Slot]:
    """Of slots sharing bytes at `step`, those given them: values live then before
    reserved ones that are not, the one written latest first; each kept only if it shares
    no byte with one kept before it."""
    order = sorted(run, key=lambda s: (not s.live_at(step), -s.first, -s.size))
    kept: list[Slot] = []
    for s in order:
        if all(s.offset + s.size <= k.offset or k.offset + k.size <= s.offset for k in kept):
            kept.append(s)
    return kept


def attribute_peak(slots: list[Slot], step: int) -> list[Slot]:
    """Every slot, those holding the peak's bytes at `step` marked `at_peak` (module
    docstring): the bytes of a reserved buffer given to a live value are its; what a
    reserved buffer holds beyond them is left unattributed."""
    out = [s for s in slots if not s.held_at(step)]
    for run in held_runs(slots, step):
        kept = _holders(run, step) if len(run) > 1 else run
        out += [replace(s, at_peak=any(s is k for k in kept)) for s in run]
    return out
