"""The fit search's planner: for one target, which values of the searched integer to
compile next, and when the answer is proved.

A fit search looks for the largest value on a grid (`lo`, `lo + step`, …, `hi`) whose
compile fits a target. The proof is a pair of compiles: the answer fits and the next
value on the grid does not (or the answer is `hi`; or even `lo` does not fit, and there
is no answer). Each compile is slow, so the planner spends as few as it can:

1. **Seeds.** Two compiles at once: `lo` (the cheapest, and the proof when nothing
   fits) and a value between `lo` and `hi` at the upper quartile of their logs
   (lo^(1/4) × hi^(3/4)), far enough from `lo` to give the slope and near enough to
   the boundary of most searches to give the slope there.
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
   it, as in Dekker's and Brent's root finders (at the roundest value of its middle
   half: a quarter of it goes at least); while nothing has failed yet it doubles the
   largest value that fitted instead (an exponential search), since the boundary is
   more likely near it than half-way to `hi`.
4. **Checks** (app.queue.fit_check). A proved boundary is checked with the roundest
   value just above it (the round check), when there is one rounder than the value that
   did not fit. When the probes show a peak that falls as the value grows
   (`Step.falls`), the search does not answer at the first boundary it proves: it
   compiles a round value in each of the fourfold stretches of the range above it,
   searches on above any that fits (each value it compiles then the roundest near the
   one it aims at), and answers when the stretches above its answer hold no value that
   fits. The checks' compiles are counted apart (`Step.checks`).

The answer is the top bracket of the probes: the largest value that fits, when the
value after it on the grid was compiled and does not fit; every value compiled above it
does not fit either. The planner is a pure function of the probes made so far
(`next_step`): the server keeps no planner state, so any replica can take the next
step, and a restart loses nothing. Whether a compile fits is the caller's verdict (by
the target's criterion); the planner only aims at `limit_bytes`, and its answer rests on
verdicts alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from app.queue.fit_check import (
    Probe,
    check_points,
    checks_made,
    falls,
    round_check,
    round_halfway,
    shown_after,
    snapped,
    twos,
)

__all__ = ["Bracket", "Grid", "How", "Probe", "Step", "next_step"]


class How(StrEnum):
    """Why a step compiles what it does."""

    SEED = "seed"
    PREDICT = "predict"
    BISECT = "bisect"
    ROUND = "round"
    """The round check of a proved boundary."""
    CHECK = "check"
    """The check of the rest of the range, once the peak is shown not monotone."""
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
class Bracket:
    """What the probes prove: the largest value that fits (None: none yet), and the
    smallest value above it that does not fit (None: none yet)."""

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
    falls: tuple[tuple[int, int], ...] = ()
    """Pairs of probed values (a, b), a < b, that show a peak that falls as the value
    grows (app.queue.fit_check.falls); empty while the probes show a monotone peak."""
    shown_after: int | None = None
    """How many probes, in the order planned, it took to show it (None: not shown)."""
    checks: int = 0
    """How many of the probes checked an answer rather than searched for it: those planned
    once the probes before them had proved a boundary (round checks, checks of the rest
    of the range), or had shown the peak not monotone."""

    @property
    def non_monotone(self) -> bool:
        return bool(self.falls)

    @property
    def done(self) -> bool:
        return self.how is How.DONE


@dataclass(frozen=True)
class _Known:
    """The probes on the grid by index, and the top bracket in indices: `fit` the largest
    fitting index, `over` the smallest index above it that does not fit (-1 and the
    grid's size stand for "none yet", just outside the grid)."""

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
        fit = max((i for i, p in on_grid.items() if p.fits), default=-1)
        over = min((i for i, p in on_grid.items() if not p.fits and i > fit), default=grid.size)
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
    (the yardstick the planner is measured against), with no checks."""
    known = _Known.of(grid, _informative(probes, limit_bytes))
    shown = tuple(falls(probes)) if predict else ()
    after = shown_after(probes) if shown else None

    seeds = sorted({0, _geometric_index(grid)})

    def step(values: list[int], how: How, **more: int | None) -> Step:
        made = checks_made(grid, probes, len(seeds), after) if predict else 0
        return Step(
            tuple(grid.value(i) for i in values),
            how,
            known.bracket(grid),
            falls=shown,
            shown_after=after,
            checks=made,
            **more,
        )

    checks = _checks(grid, known, after, len(probes)) if predict else []
    if checks:
        return step(checks, How.CHECK if shown else How.ROUND)
    if known.unknown == 0:
        return step([], How.DONE, largest=grid.value(known.fit) if known.fit >= 0 else None)
    if predict and not probes:
        return step(seeds, How.SEED)
    predicted = None
    if predict and limit_bytes is not None and not _stalled(grid, probes, len(seeds)):
        aim = _aim(known, limit_bytes)
        predicted = _round_line(grid, known, aim) if shown else _predicted_index(known, aim)
    if predicted is None:
        index = _halfway(known, gallop=predict)
        if predict:
            index = round_halfway(grid, known.fit, known.over, index)
        return step([index], How.BISECT)
    # The prediction itself, or the value past it when it is proved to fit already; the
    # roundest value near it once the peak is shown to depend on more than the value.
    index = max(predicted, known.fit + 1)
    index = snapped(grid, known.fit, index) if shown else index
    return step([index], How.PREDICT, predicted=grid.value(max(predicted, 0)))


CHECK_BUDGET = 4
"""Compiles the checks may take once the peak is shown not monotone, per bit of the
grid's size (84 over a million values): past them the search answers with what it has
proved."""


def _checks(grid: Grid, known: _Known, shown: int | None, made: int) -> list[int]:
    """The indices that check the top bracket: once it is proved, its round check while
    the peak looks monotone; once it does not, the check of the rest of the range above
    it, at the bracket's own scale and coarser (within the budget). Empty when there is
    nothing left to check."""
    if known.over >= known.size:
        return []
    probed = set(known.probes)
    if shown is None:
        if known.unknown or known.fit < 0:  # an answer of none rests on lo alone
            return []
        index = round_check(grid, known.over)
        return [index] if index is not None and index not in probed else []
    if made - shown >= CHECK_BUDGET * grid.size.bit_length():
        return []
    return check_points(grid, known.over, probed, width=known.over - known.fit)


def _round_line(grid: Grid, known: _Known, aim: int) -> int | None:
    """Once the peak is shown not monotone: the last index that the line through the
    largest value that fits and the roundest value above it that does not keeps within
    `aim` (round values' peaks lie on the program's own line, others' may not), else
    the chord across the bracket; None when neither gives one inside it."""
    fit = known.probes.get(known.fit)
    above = [i for i, p in known.probes.items() if i > known.fit and p.peak_bytes is not None]
    over = max(above, key=lambda i: (twos(grid.value(i)), -i), default=None)
    lines = []
    if fit is not None and fit.peak_bytes is not None and over is not None:
        lines.append(((known.fit, fit.peak_bytes), (over, known.probes[over].peak_bytes or 0)))
    lines += _lines(known, aim)[-1:]
    return _crossing(known, aim, lines)


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


SEED_AT = 0.75
"""Where the second seed lies between `lo` and `hi`, in the log of the value."""


def _geometric_index(grid: Grid) -> int:
    """The grid index nearest the upper quartile of `lo` … `hi` in the log of the value,
    lo^(1/4) × hi^(3/4) (4,096 of 1 … 65,536; the midpoint's when `lo` is not
    positive): far enough from `lo` for a slope, near enough to the boundary of most
    searches that the slope is the one that matters there (a peak at small values often
    carries buffers the compiler drops at larger ones)."""
    if grid.lo <= 0:
        mean = grid.lo + (grid.hi - grid.lo) * SEED_AT
    else:
        mean = math.exp((1 - SEED_AT) * math.log(grid.lo) + SEED_AT * math.log(grid.hi))
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
    return _crossing(known, aim, _lines(known, aim))


def _crossing(known: _Known, aim: int, lines: list[Line]) -> int | None:
    """The first of `lines` whose crossing of `aim` lies inside the bracket (or past `hi`
    while nothing has failed: then `hi`), as an index."""
    for (i1, p1), (i2, p2) in lines:
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
