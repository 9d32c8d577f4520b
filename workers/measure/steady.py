"""Warm up until the timings are steady: which leading samples were still a transient.

A sampling loop adds its samples one by one; `Settling` looks at them only when a window
of the samples asked for has filled, and asks one question of it: is its front still a
warm-up transient? The samples of the window are ranked; for every prefix length k up to
half the window, the sum of the prefix's centred ranks is divided by its exact
permutation standard deviation. If the largest of these z-scores passes the critical
value for the window's size (the permutation null, tabulated in `CRITICAL_001`, one-sided,
alpha = 0.01), and the prefix's median is at least `WARMUP_MIN_EFFECT` slower than the
rest's, the prefix is cut at the k that scored highest and sampling goes on; otherwise
the window is kept. Ranks make the test exact under "every sample comes from one
distribution", whatever that distribution is, so its false alarms (about 1%) do not
depend on the noise, the outliers or the workload. Standardising each prefix (rather
than Pettitt's raw rank sum) is what lets a short slow prefix stand out.

One slow first sample cannot be seen by ranks (z_1 stays near 1.7): the uncounted
`measure.warmup` calls before sampling cover that. Below `MIN_WINDOW` samples no prefix
can be told apart at 1%, so a loop asked for fewer judges nothing and discards nothing.
NumPy only; it runs between samples, never inside a timed interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

MIN_WINDOW = 10
"""The warm-up test (and `shape`) needs this many samples; below it neither judges."""
WARMUP_MIN_EFFECT = 0.05
"""A prefix is cut only when its median is at least 5% above the rest's: a real but
smaller shift barely moves the median and is not worth the samples it costs."""
WARMUP_TIME_SHARE = 0.5
"""...and discards at most this share of the sampling time cap (`measure.max_seconds`)."""

CRITICAL_001: tuple[tuple[int, float], ...] = (
    (10, 2.402),
    (12, 2.496),
    (14, 2.569),
    (16, 2.623),
    (20, 2.700),
    (25, 2.760),
    (30, 2.806),
    (40, 2.899),
    (50, 2.932),
    (70, 2.999),
    (100, 3.037),
    (150, 3.093),
    (200, 3.156),
    (300, 3.194),
    (500, 3.251),
    (700, 3.277),
    (1000, 3.311),
    (2000, 3.349),
    (5000, 3.425),
)
"""The 99th percentile of max_k z_k under the permutation null, per window size: 40,000
random permutations each (`null_quantile(n, 0.01, 40_000, seed=1)` reproduces them within
Monte Carlo error). Interpolated linearly in log n; constant beyond the ends."""


def as_array(samples: Sequence[float] | FloatArray) -> FloatArray:
    return np.asarray(samples, dtype=np.float64)


def ranks(values: Sequence[float] | FloatArray) -> FloatArray:
    """Ranks 1..n of `values`, ties sharing the mean of the ranks they span."""
    x = as_array(values)
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    # Start and end index of each run of equal values, in sorted order.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    mean_rank = (starts + ends + 1) / 2.0
    out = np.empty(x.size, dtype=np.float64)
    out[order] = np.repeat(mean_rank, ends - starts)
    return out


def prefix_z(values: Sequence[float] | FloatArray) -> FloatArray:
    """z_k for k = 1 .. n // 2: how much slower than the rest the first k samples rank.

    The sum of the first k centred ranks has mean 0 and variance
    k (n - k) / (n (n - 1)) * sum(centred ranks ** 2) when every order is equally likely
    (sampling k of n without replacement), ties included.
    """
    r = ranks(values)
    n = r.size
    centred = r - r.mean()
    total = float(np.sum(centred**2))
    half = n // 2
    k = np.arange(1, half + 1, dtype=np.float64)
    if total == 0.0 or half == 0:
        return np.zeros(half, dtype=np.float64)
    variance = k * (n - k) / (n * (n - 1)) * total
    return np.cumsum(centred)[:half] / np.sqrt(variance)


def critical_value(n: int) -> float:
    """The warm-up test's critical z for a window of `n` samples (alpha = 0.01)."""
    sizes = np.log([s for s, _ in CRITICAL_001])
    values = np.array([c for _, c in CRITICAL_001])
    return float(np.interp(math.log(max(n, 1)), sizes, values))


def null_quantile(n: int, alpha: float, reps: int, seed: int) -> float:
    """The (1 - alpha) quantile of max_k z_k over `reps` random orders of n distinct
    values: how `CRITICAL_001` was made, and how a test checks it."""
    rng = np.random.default_rng(seed)
    base = np.arange(1, n + 1, dtype=np.float64)
    centred = base - base.mean()
    half = n // 2
    k = np.arange(1, half + 1, dtype=np.float64)
    sd = np.sqrt(k * (n - k) * (n + 1) / 12.0)
    found: list[FloatArray] = []
    chunk = max(1, 2_000_000 // n)
    done = 0
    while done < reps:
        m = min(chunk, reps - done)
        orders = rng.permuted(np.tile(centred, (m, 1)), axis=1)
        found.append((np.cumsum(orders, axis=1)[:, :half] / sd).max(axis=1))
        done += m
    return float(np.quantile(np.concatenate(found), 1.0 - alpha))


@dataclass(frozen=True)
class LeadingChange:
    """A slow prefix found at the front of a window: cut it and sample on."""

    cut: int
    """How many leading samples are the transient."""
    z: float
    critical: float
    slowdown: float
    """The prefix's median over the rest's."""


def leading_change(window: Sequence[float] | FloatArray) -> LeadingChange | None:
    """The warm-up transient at the front of `window`, or None when it looks steady."""
    x = as_array(window)
    n = x.size
    if n < MIN_WINDOW:
        return None
    z = prefix_z(x)
    best = int(np.argmax(z))
    critical = critical_value(n)
    if z[best] <= critical:
        return None
    cut = best + 1
    slowdown = float(np.median(x[:cut]) / np.median(x[cut:]))
    if slowdown < 1.0 + WARMUP_MIN_EFFECT:
        return None
    return LeadingChange(cut=cut, z=float(z[best]), critical=critical, slowdown=slowdown)


@dataclass
class Settling:
    """Which leading samples of one sampling loop were still warming up.

    The loop owns its list of samples; `Settling` keeps the index where the current
    window starts (`start`) and is asked, as the list grows, whether to test the window
    (`due`) and to test it (`test`). Discarding stops for good once the discarded samples
    add up to `max_discard_s` (`gave_up = "time"`), so warm-up never eats the time cap;
    the loop's own sample cap ends the rest (`gave_up = "cap"`, set by the caller).
    """

    max_discard_s: float | None = None
    start: int = 0
    cuts: list[LeadingChange] = field(default_factory=list)
    gave_up: Literal["cap", "time"] | None = None

    def test(self, samples: Sequence[float]) -> bool:
        """Test the window `samples[start:]` once; True when a transient was cut."""
        if self.gave_up is not None:
            return False
        found = leading_change(samples[self.start :])
        if found is None:
            return False
        self.start += found.cut
        self.cuts.append(found)
        if (
            self.max_discard_s is not None
            and math.fsum(samples[: self.start]) >= self.max_discard_s
        ):
            self.gave_up = "time"
        return True

    def slowdown(self, samples: Sequence[float], kept_from: int) -> float | None:
        """How much slower the discarded samples were than the kept ones (medians)."""
        if kept_from == 0 or kept_from >= len(samples):
            return None
        return float(np.median(samples[:kept_from]) / np.median(samples[kept_from:]))
