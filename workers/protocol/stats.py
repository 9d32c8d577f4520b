"""Sample statistics under pytest-benchmark's names, computed without third-party code.

Here in the protocol (no jax, no NumPy) because both halves of the result gate compute
them: the sampling loops on the worker, and the server, which recomputes a posted
measurement's statistics from the samples it stores (`workers.protocol.speeds`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from workers.protocol.runs import Stats

WIDE_SPREAD = 0.10
"""IQR / median above which a measurement is flagged as too noisy to trust closely."""


def quartiles(ordered: Sequence[float]) -> tuple[float, float]:
    """Lower and upper quartiles of sorted data, as pytest-benchmark computes them.

    An even count splits into halves and takes each half's median; an odd count of 4m+1
    or 4m+3 interpolates between neighbours with weights of 1/4 and 3/4.
    """
    count = len(ordered)
    if count == 0:
        raise ValueError("no samples")
    if count == 1:
        return ordered[0], ordered[0]
    if count % 2 == 0:
        half = count // 2
        return statistics.median(ordered[:half]), statistics.median(ordered[half:])
    m = count // 4
    if count % 4 == 1:
        q1 = 0.25 * ordered[m - 1] + 0.75 * ordered[m]
        q3 = 0.75 * ordered[3 * m] + 0.25 * ordered[3 * m + 1]
    else:
        q1 = 0.75 * ordered[m] + 0.25 * ordered[m + 1]
        q3 = 0.25 * ordered[3 * m + 1] + 0.75 * ordered[3 * m + 2]
    return q1, q3


def relative_iqr(samples: Sequence[float]) -> float:
    """IQR / median of `samples`: the spread measure adaptive sampling stops on."""
    ordered = sorted(samples)
    q1, q3 = quartiles(ordered)
    median = statistics.median(ordered)
    return (q3 - q1) / median if median > 0 else math.inf


def summarize(samples: Sequence[float]) -> Stats:
    """Statistics of `samples` (seconds), named and defined as in pytest-benchmark."""
    ordered = sorted(samples)
    count = len(ordered)
    if count == 0:
        raise ValueError("no samples")
    mean = math.fsum(ordered) / count
    stddev = statistics.stdev(ordered, mean) if count > 1 else 0.0
    median = statistics.median(ordered)
    q1, q3 = quartiles(ordered)
    iqr = q3 - q1
    # Outliers as pytest-benchmark counts them: beyond one standard deviation from the
    # mean, and beyond 1.5 IQR outside the quartiles.
    beyond_stddev = sum(1 for x in ordered if abs(x - mean) > stddev)
    beyond_iqr = sum(1 for x in ordered if x < q1 - 1.5 * iqr or x > q3 + 1.5 * iqr)
    return Stats(
        min=ordered[0],
        max=ordered[-1],
        mean=mean,
        stddev=stddev,
        median=median,
        q1=q1,
        q3=q3,
        iqr=iqr,
        outliers=f"{beyond_stddev};{beyond_iqr}",
        rounds=count,
        wide_spread=median > 0 and iqr / median > WIDE_SPREAD,
    )
