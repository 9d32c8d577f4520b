"""The fit search's planner: for one target, which values of the searched integer to
compile next, and when the answer is proved.

A fit search looks for the largest value on a grid (`lo`, `lo + step`, …, `hi`) whose
compile fits a target. The proof is a pair of compiles: the answer fits and the next
value on the grid does not (or the answer is `hi`; or even `lo` does not fit, and there
is no answer). Each compile is slow, so the planner spends as few as it can:

1. **Seeds.** Two compiles at once: `lo` (the cheapest, and the proof when nothing
   fits) and a value between `lo` and `hi` at their geometric mean, cheap to compile
   when the range is wide but far enough from `lo` to give the slope.
2. **Prediction.** A program's peak memory is nearly affine in a batch-like dimension,
   so the line through two peaks predicts the last value whose peak stays within the
   limit, and that value is compiled. The next line goes through its peak and the next
   one nearest the aim (the secant method), so a prediction that was right is proved
   by the compile on its other side: four compiles in all for an affine peak; a curve,
   a step or a knee (where XLA starts to rematerialize) costs a compile or two more,
   each aimed from the peaks closest to the boundary.
3. **Bisection.** When no line can be drawn (fewer than two peaks, a peak that does
   not grow, no limit to aim at, a prediction that contradicts a compile already made),
   or when two compiles in a row did not halve what is unknown, the next compile halves
   it, as in Dekker's and Brent's root finders; while nothing has failed yet it doubles
   the largest value that fitted instead (an exponential search), since the boundary
   is more likely near it than half-way to `hi`.

The planner is a pure function of the probes made so far (`next_step`): the server
keeps no planner state, so any replica can take the next step, and a restart loses
nothing. Whether a compile fits is the caller's verdict (by the target's criterion); the
planner only aims at `limit_bytes`, and its answer rests on verdicts alone. When fitting
is not monotone in the value (a noisy compiler), the answer is still a proved boundary:
it fits, and the next value does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum


class How(StrEnum):
    """Why a step compiles what it does."""

    SEED = "seed"
    PREDICT = "predict"
    BISECT = "bisect"
    DONE = "done"


@dataclass(frozen=True)
class Grid:
    """The values a search may compile: `lo`, `lo + step`, …, `hi` (`hi - lo` a multiple
    of `step`)."""

    lo: int
    hi: int
    step: int = 1

    def __post_init__(self) -> None:
        if self.step < 1 or self.hi < self.lo or (self.hi - self.lo) % self.step:
            raise ValueError(f"not a grid: lo={self.lo}, hi={self.hi}, step={self.step}")

    @property
    def size(self) -> int:
        """How many values the grid holds."""
        return (self.hi - self.lo) // self.step + 1

    def value(self, index: int) -> int:
        return self.lo + index * self.step

    def index(self, value: int) -> int | None:
        """The position of `value` on the grid; None when it is not on it."""
        offset = value - self.lo
        if offset < 0 or offset % self.step or value > self.hi:
            return None
        return offset // self.step


@dataclass(frozen=True)
class Probe:
    """One finished compile: its value, whether it fits, and its peak when known."""

    value: int
    fits: bool
    peak_bytes: int | None = None


@dataclass(frozen=True)
class Bracket:
    """What the probes prove: the largest value that fits below every value that does not
    (None: none yet), and the smallest value that does not fit (None: none yet)."""

    fits: int | None
    over: int | None


@dataclass(frozen=True)
class Step:
    """The planner's answer: the values to compile now (none when `done`), why, the
    bracket so far and, when done, the largest value that fits (None when even `lo`
    does not)."""

    values: tuple[int, ...]
    how: How
    bracket: Bracket
    largest: int | None = None
    predicted: int | None = None
    """The value the line predicted as the last that fits (the prediction steps only)."""

    @property
    def done(self) -> bool:
        return self.how is How.DONE


@dataclass(frozen=True)
class _Known:
    """The probes on the grid by index, and the proved bracket in indices: `fit` the
    largest fitting index below `over`, the smallest index that does not fit (-1 and
    the grid's size stand for "none yet", just outside the grid)."""

    probes: dict[int, Probe]
    fit: int
    over: int
    size: int

    @classmethod
    def of(cls, grid: Grid, probes: list[Probe]) -> _Known:
        on_grid: dict[int, Probe] = {}
        for probe in probes:
            index = grid.index(probe.value)
            if index is not None:
                on_grid[index] = probe
        over = min((i for i, p in on_grid.items() if not p.fits), default=grid.size)
        fit = max((i for i, p in on_grid.items() if p.fits and i < over), default=-1)
        return cls(on_grid, fit, over, grid.size)

    def bracket(self, grid: Grid) -> Bracket:
        return Bracket(
            grid.value(self.fit) if self.fit >= 0 else None,
            grid.value(self.over) if self.over < grid.size else None,
        )

    @property
    def unknown(self) -> int:
        """How many grid values lie strictly between the bracket's ends."""
        return self.over - self.fit - 1


def next_step(
    grid: Grid, probes: list[Probe], limit_bytes: int | None, *, predict: bool = True
) -> Step:
    """What to compile next for one target, given every finished probe of it in the
    order they were planned; `limit_bytes` is the peak the prediction aims at (None:
    no prediction). With `predict=False` the search is plain bisection from the start
    (the yardstick the planner is measured against)."""
    known = _Known.of(grid, _informative(probes, limit_bytes))
    bracket = known.bracket(grid)
    if known.unknown == 0:
        largest = grid.value(known.fit) if known.fit >= 0 else None
        return Step((), How.DONE, bracket, largest)
    seeds = sorted({0, _geometric_index(grid)})
    if predict and not probes:
        return Step(tuple(grid.value(i) for i in seeds), How.SEED, bracket)
    predicted = None
    if predict and limit_bytes is not None and not _stalled(grid, probes, len(seeds)):
        predicted = _predicted_index(known, _aim(known, limit_bytes))
    if predicted is None:
        return Step((grid.value(_halfway(known, gallop=predict)),), How.BISECT, bracket)
    # The prediction itself, or the value past it when it is proved to fit already.
    value = grid.value(max(predicted, known.fit + 1))
    return Step((value,), How.PREDICT, bracket, predicted=grid.value(max(predicted, 0)))


def _informative(probes: list[Probe], limit_bytes: int | None) -> list[Probe]:
    """`probes`, each refused one's peak forgotten where it is not above the limit: that
    figure understates what the program needs (libtpu rounds its refusal to the limit
    itself, "31.25G exceeds available HBM (31.25G)"), and a line drawn through it
    predicts the refused value again and again."""
    if limit_bytes is None:
        return probes
    return [
        replace(p, peak_bytes=None)
        if not p.fits and p.peak_bytes is not None and p.peak_bytes <= limit_bytes
        else p
        for p in probes
    ]


def _stalled(grid: Grid, probes: list[Probe], seeds: int) -> bool:
    """Whether the last two compiles after the first prediction left more than half of
    what was unknown before them: then the next compile bisects. (The safeguard of
    Dekker's and Brent's root finders: at worst every other compile halves.)"""
    if len(probes) < seeds + 4:
        return False
    before = _Known.of(grid, probes[:-2]).unknown
    return _Known.of(grid, probes).unknown * 2 > before


def _halfway(known: _Known, *, gallop: bool) -> int:
    """The index that halves the unknown stretch; with `gallop` and nothing proved not
    to fit yet, twice the largest index that fits (as an exponential search does): the
    boundary is more likely near what fitted than half-way to `hi`."""
    if gallop and known.over == known.size and known.fit >= 0:
        return min(known.size - 1, 2 * known.fit + 1)
    return (known.fit + known.over) // 2


def _geometric_index(grid: Grid) -> int:
    """The grid index nearest the geometric mean of `lo` and `hi` (their midpoint when
    `lo` is not positive)."""
    mean = math.sqrt(grid.lo * grid.hi) if grid.lo > 0 else (grid.lo + grid.hi) / 2
    return min(grid.size - 1, max(0, round((mean - grid.lo) / grid.step)))


OVERSHOOT = 1.05
"""When every compile so far fitted above the aim, the next aims this much past the
largest peak that fitted: a compile that does not fit is what bounds the real limit."""


def _aim(known: _Known, limit_bytes: int) -> int:
    """`limit_bytes`, unless the verdicts prove the real limit is elsewhere: it is at
    least the largest peak that fitted and below the smallest that did not. Proved
    wrong, the aim is the middle of those two peaks, or past the largest that fitted
    when none has failed yet."""
    fitted = [p.peak_bytes for p in known.probes.values() if p.fits and p.peak_bytes]
    refused = [p.peak_bytes for p in known.probes.values() if not p.fits and p.peak_bytes]
    low, high = max(fitted, default=None), min(refused, default=None)
    if low is not None and high is not None:
        if low >= high:
            return limit_bytes  # the peaks and the verdicts disagree: aim as told
        if not low <= limit_bytes < high:
            return (low + high) // 2
    elif low is not None and limit_bytes < low:
        return math.ceil(low * OVERSHOOT)
    elif high is not None and limit_bytes >= high:
        return high - 1
    return limit_bytes


Line = tuple[tuple[int, int], tuple[int, int]]
"""Two (index, peak) points a prediction draws its line through."""


def _lines(known: _Known, aim: int) -> list[Line]:
    """The lines to predict from, best first: through the peak nearest the aim and the
    nearest to the aim of those with another peak (near the boundary a curved or
    stepped peak is closest to a line); then through the peaks at the bracket's two
    ends (a secant across what is unknown, as regula falsi draws it)."""
    peaks = {i: p.peak_bytes for i, p in known.probes.items() if p.peak_bytes is not None}

    def nearness(i: int) -> tuple[int, int]:
        # Ties go to the point closer to the unknown stretch.
        return abs(peaks[i] - aim), min(abs(i - known.fit), abs(i - known.over))

    lines: list[Line] = []
    ranked = sorted(peaks, key=nearness)
    if ranked:
        first = ranked[0]
        second = next((i for i in ranked if peaks[i] != peaks[first]), None)
        if second is not None:
            low, high = sorted((first, second))
            lines.append(((low, peaks[low]), (high, peaks[high])))
    if known.fit in peaks and known.over in peaks:
        lines.append(((known.fit, peaks[known.fit]), (known.over, peaks[known.over])))
    return lines


def _predicted_index(known: _Known, aim: int) -> int | None:
    """The last index whose peak a line keeps within `aim` (the first of `_lines` that
    gives one inside the bracket), moved onto `hi` when it falls past it and nothing
    has failed yet; None when no line gives one (too few peaks, a peak that does not
    grow, or a prediction that contradicts a compile already made)."""
    for (i1, p1), (i2, p2) in _lines(known, aim):
        if p2 <= p1:
            continue
        # The crossing in index units, exactly: i1 + (aim - p1) * (i2 - i1) / (p2 - p1).
        crossing = i1 + ((aim - p1) * (i2 - i1)) // (p2 - p1)
        if crossing >= known.over:
            if known.over == known.size:
                return known.over - 1
        elif crossing >= known.fit:
            return crossing
        elif known.fit == -1:
            return -1
    return None
