"""Whether the samples kept are one steady population, two clusters, or a moving target.

Two questions of the kept samples, each answered with ranks or medians so that a few wild
samples (a page fault, a context switch) cannot decide it alone:

- **bimodal**: the log-times are sorted and split at their widest gap, among the splits
  that leave each cluster at least `MIN_CLUSTER_SHARE` of the samples and at least
  `MIN_CLUSTER_COUNT` of them (a few outliers never make a cluster). Two modes when the
  cluster medians are at least `BIMODAL_MIN_RATIO` apart, at least
  `BIMODAL_MIN_SEPARATION` within-cluster robust standard deviations apart (1.4826 x the
  MAD of each sample's residual from its own cluster's median), and the empty gap itself
  is at least `gap_needed(n)` such deviations wide. A unimodal set has no wide empty gap
  in its middle; a fast/slow mixture has one.
- **drifting**: Spearman's rank correlation of the samples with their order,
  |rho| sqrt(n - 1) above `DRIFT_Z` (two-sided alpha = 0.005), with the medians of the
  first and last thirds at least `DRIFT_MIN_EFFECT` apart.

Thresholds were chosen by simulation: on steady sets of 20 and of 200 samples (log-normal
noise, 2% outliers) each flag fires on at most about 2% of sets. NumPy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workers.measure.steady import MIN_WINDOW, FloatArray, as_array, ranks
from workers.protocol import Shape

MIN_CLUSTER_SHARE = 0.15
"""Each cluster of a bimodal set holds at least this share of the samples (and at least
`MIN_CLUSTER_COUNT`): a handful of outliers is not a second mode."""
MIN_CLUSTER_COUNT = 4
BIMODAL_MIN_RATIO = 1.10
"""The slow cluster's median is at least 10% above the fast one's (the spread warning's level)."""
BIMODAL_MIN_SEPARATION = 4.0
"""Cluster medians at least this many within-cluster robust standard deviations apart."""
GAP_AT_20 = 2.5
"""The empty gap two clusters of 20 samples need, in within-cluster robust sd's."""
GAP_FLOOR = 0.75
"""...and of any number of samples."""
LOG_SPREAD_FLOOR = 1e-3
"""A cluster's robust sd on log-times is never taken below 0.1% (timer quantisation)."""
DRIFT_Z = 2.807
"""|Spearman rho| * sqrt(n - 1) above this is a trend (two-sided alpha = 0.005)."""
DRIFT_MIN_EFFECT = 0.05
"""The first and last thirds' medians differ by at least 5% for a trend to count."""


@dataclass(frozen=True)
class Split:
    """The widest gap between two clusters of a set of samples (on log-times)."""

    fast_median: float
    slow_median: float
    slow_share: float
    gap: float
    """The empty stretch between the clusters, in within-cluster robust sd's."""
    separation: float
    """The distance between the cluster medians, in within-cluster robust sd's."""


@dataclass(frozen=True)
class Trend:
    """How the samples move with their order."""

    rho: float
    z: float
    change: float
    """Median of the last third over median of the first third."""


def _robust_sd(x: FloatArray, centred: bool = False) -> float:
    """1.4826 x the median absolute deviation: a standard deviation that outliers cannot
    inflate (about the median, or about zero for residuals already centred)."""
    middle = 0.0 if centred else float(np.median(x))
    return float(1.4826 * np.median(np.abs(x - middle)))


def gap_needed(n: int) -> float:
    """The gap, in within-cluster robust sd's, that two clusters of n samples need.

    Gaps between neighbouring order statistics shrink like 1/n while the spread estimate's
    own noise shrinks like 1/sqrt(n); the threshold follows the slower of the two, set so
    that steady sets of 20 (log-normal, 2% outliers) pass as bimodal under 1% of the time.
    """
    return max(GAP_FLOOR, GAP_AT_20 * math.sqrt(20.0 / max(n, 1)))


def best_split(samples: Sequence[float] | FloatArray) -> Split | None:
    """The split of the sorted log-times at their widest gap, among the splits that leave
    each side at least the minimum share; None when no split can leave that much."""
    y = np.sort(np.log(as_array(samples)))
    n = y.size
    least = max(MIN_CLUSTER_COUNT, math.ceil(MIN_CLUSTER_SHARE * n))
    if n < 2 * least:
        return None
    # A split at i puts y[:i] in the fast cluster; its gap is y[i] - y[i - 1]. Allowed
    # splits keep `least` samples on each side, so a few outliers never form a cluster.
    allowed = np.arange(least, n - least + 1)
    at = int(allowed[int(np.argmax(y[allowed] - y[allowed - 1]))])
    lo, hi = y[:at], y[at:]
    residuals = np.concatenate([lo - np.median(lo), hi - np.median(hi)])
    spread = max(_robust_sd(residuals, centred=True), LOG_SPREAD_FLOOR)
    return Split(
        fast_median=float(np.exp(np.median(lo))),
        slow_median=float(np.exp(np.median(hi))),
        slow_share=(n - at) / n,
        gap=float(y[at] - y[at - 1]) / spread,
        separation=float(np.median(hi) - np.median(lo)) / spread,
    )


def bimodal(samples: Sequence[float] | FloatArray) -> Split | None:
    """The split, when the samples fall into two well-separated clusters; else None."""
    split = best_split(samples)
    if split is None:
        return None
    apart = split.slow_median / split.fast_median >= BIMODAL_MIN_RATIO
    clear = split.gap >= gap_needed(len(samples))
    return split if apart and clear and split.separation >= BIMODAL_MIN_SEPARATION else None


def trend(samples: Sequence[float] | FloatArray) -> Trend | None:
    """Spearman's rho of the samples against their order, and the change it amounts to."""
    x = as_array(samples)
    n = x.size
    if n < 3:
        return None
    r = ranks(x)
    order = np.arange(1, n + 1, dtype=np.float64)
    rc, oc = r - r.mean(), order - order.mean()
    denominator = math.sqrt(float(np.sum(rc**2) * np.sum(oc**2)))
    rho = float(np.sum(rc * oc) / denominator) if denominator > 0 else 0.0
    third = max(1, n // 3)
    change = float(np.median(x[-third:]) / np.median(x[:third]))
    return Trend(rho=rho, z=rho * math.sqrt(n - 1), change=change)


def drifting(samples: Sequence[float] | FloatArray) -> Trend | None:
    """The trend, when the samples move steadily one way with time; else None."""
    found = trend(samples)
    if found is None:
        return None
    large = abs(math.log(found.change)) >= math.log1p(DRIFT_MIN_EFFECT)
    return found if abs(found.z) > DRIFT_Z and large else None


def shape(samples: Sequence[float] | FloatArray) -> Shape | None:
    """'drifting', 'bimodal' or None (steady, or too few samples to say).

    A trend wins over two clusters: two clusters ordered in time (a step) are a change
    during sampling, and the reader's question is then when, not how often.
    """
    if len(samples) < MIN_WINDOW:
        return None
    if drifting(samples) is not None:
        return "drifting"
    if bimodal(samples) is not None:
        return "bimodal"
    return None
