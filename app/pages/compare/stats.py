"""Ratio of medians with a bootstrap interval over independent runs, and the A/A floor.

Each run contributes ONE number, its median: between separate processes the medians of
the same job move by tens of percent (about ±30% for a 512² matmul on a CPU), far more
than samples move within one run, so resampling one run's samples would claim a
precision that is not there. The bootstrap resamples runs with replacement on each side,
takes each side's median of run medians, and reads the percentile interval of their
ratio. The A/A noise floor is the same interval for a side against a resampling of
itself: how far the ratio moves when nothing changed. Pure Python; seeded, so a page
shows the same interval each time.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_RUNS = 3
"""Independent runs each side needs before a ratio is printed."""
RESAMPLES = 2000
LEVEL = 0.95
SEED = 20261129


@dataclass(frozen=True)
class Interval:
    """A ratio and its percentile bootstrap interval."""

    ratio: float
    low: float
    high: float
    level: float
    resamples: int

    @property
    def includes_one(self) -> bool:
        """True when 'no difference' is inside the interval."""
        return self.low <= 1.0 <= self.high

    @property
    def half_width_pct(self) -> float:
        """How far the interval reaches from 1, in percent (for an A/A floor)."""
        return max(abs(self.high - 1.0), abs(1.0 - self.low)) * 100.0


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted data by linear interpolation between order statistics."""
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _resampled_median(values: Sequence[float], rng: random.Random) -> float:
    return statistics.median(rng.choices(values, k=len(values)))


def _check(name: str, values: Sequence[float]) -> None:
    if not values:
        raise ValueError(f"{name}: no runs")
    if any(v <= 0 for v in values):
        raise ValueError(f"{name}: medians must be positive seconds")


def ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = SEED,
) -> Interval:
    """median(b) / median(a) of run medians, with its bootstrap interval over runs.

    Below 1, side B took less time than side A.
    """
    _check("a", a)
    _check("b", b)
    rng = random.Random(seed)
    ratios = sorted(_resampled_median(b, rng) / _resampled_median(a, rng) for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    return Interval(
        ratio=statistics.median(b) / statistics.median(a),
        low=_percentile(ratios, tail),
        high=_percentile(ratios, 1.0 - tail),
        level=level,
        resamples=resamples,
    )


def noise_floor(
    runs: Sequence[float], *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED
) -> Interval:
    """The A/A interval: a side's run medians against an independent resampling of
    themselves. Its width is the smallest difference these repeats could show."""
    _check("runs", runs)
    rng = random.Random(seed + 1)
    ratios = sorted(
        _resampled_median(runs, rng) / _resampled_median(runs, rng) for _ in range(resamples)
    )
    tail = (1.0 - level) / 2.0
    return Interval(
        ratio=1.0,
        low=_percentile(ratios, tail),
        high=_percentile(ratios, 1.0 - tail),
        level=level,
        resamples=resamples,
    )


def verdict(interval: Interval, a_name: str = "A", b_name: str = "B") -> str:
    """The sentence the page prints: a direction only when the interval excludes 1."""
    pct = f"{interval.level:.0%}"
    span = f"{interval.ratio:.3f}× ({pct} interval {interval.low:.3f}–{interval.high:.3f})"
    if interval.includes_one:
        return f"No measurable difference: {b_name}/{a_name} time ratio {span} includes 1."
    if interval.ratio < 1.0:
        return f"{b_name} takes {span} the time of {a_name}: {b_name} is faster."
    return f"{b_name} takes {span} the time of {a_name}: {b_name} is slower."
