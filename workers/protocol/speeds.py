"""Every speed of a run, worked out from its samples: statistics and calls per second of
each measurement, the rates at the median of the rates' measurement, and the subjects'
comparison.

The result gate (`workers.protocol.gate`) applies `with_speeds` to every valid run, on
both halves: the publish step hands it raw samples and the rates' basis, and the server
recomputes the same from the samples it stores, so no statistic, rate or comparison a
worker sends is stored as sent. A measurement without samples has no statistics, and a
boundary in `NEVER_A_SPEED` gets no calls per second and no rate.
"""

from __future__ import annotations

import statistics
from typing import Any

from workers.protocol.base import NEVER_A_SPEED
from workers.protocol.runs import Measurement, Rates, RunResult
from workers.protocol.stats import summarize

KERNEL_SUBJECT = "kernel"
"""The subject a comparison compares the others with (the cuda path's own kernel)."""
CUBLAS_SUBJECT = "cuBLAS"
"""The cuda path's library baseline (matmul only)."""
JAX_SUBJECT = "JAX"
"""The cuda path's JAX baseline: the same workload through jax.jit on the same GPU."""


def restated(m: Measurement) -> Measurement:
    """`m` with its statistics computed from its own samples (None without samples), calls
    per second at the mean where its boundary is a speed, and its discard count that of
    its discarded samples (where a loop judged the warm-up, or discarded any)."""
    stats = summarize(m.samples_s) if m.samples_s else None
    if stats is not None and m.boundary not in NEVER_A_SPEED and stats.mean > 0:
        stats.ops = 1.0 / stats.mean
    # A sampling loop that judged its warm-up, or discarded samples, counts them; a
    # measurement no such loop took (the device's own time, the cuda path's) has no count.
    counted = m.shape_checked is not None or bool(m.warmup_samples_s)
    update: dict[str, Any] = {"stats": stats}
    update["warmup_discarded"] = len(m.warmup_samples_s) if counted else None
    return m.model_copy(update=update)


def _median(measurements: list[Measurement], rates: Rates) -> float | None:
    for m in measurements:
        if m.boundary is rates.boundary and m.subject == rates.subject and m.stats is not None:
            return m.stats.median if m.stats.median > 0 else None
    return None


def rates_at(rates: Rates, measurements: list[Measurement]) -> Rates:
    """`rates` (work counts and the measurement they are read at) with the rates achieved
    at that measurement's median per call; none where it has no median or is no speed."""
    median = _median(measurements, rates) if rates.boundary not in NEVER_A_SPEED else None
    if rates.boundary is None or median is None:
        return rates.model_copy(update={"boundary": None, "flops_per_s": None, "bytes_per_s": None})
    seconds = median * rates.calls
    return rates.model_copy(
        update={
            "flops_per_s": rates.flops / seconds if rates.flops > 0 else None,
            "bytes_per_s": rates.bytes / seconds if rates.bytes > 0 else None,
        }
    )


def comparison(measurements: list[Measurement], rates: Rates) -> list[dict[str, Any]]:
    """Each subject's median per boundary with its rates, and how it compares with the
    kernel's under the same boundary (never across boundaries)."""
    kernel = {
        m.boundary: m.stats.median for m in measurements if m.subject == KERNEL_SUBJECT and m.stats
    }
    rows = []
    for m in measurements:
        if m.stats is None or m.stats.median <= 0 or m.boundary in NEVER_A_SPEED:
            continue
        median = m.stats.median
        ours = kernel.get(m.boundary)
        rows.append(
            {
                "subject": m.subject,
                "boundary": m.boundary.value,
                "median_s": median,
                "rounds": m.stats.rounds,
                "flops_per_s": rates.flops / median if rates.flops > 0 else None,
                "bytes_per_s": rates.bytes / median if rates.bytes > 0 else None,
                "speedup_over_kernel": ours / median if ours else None,
            }
        )
    return rows


def with_speeds(run: RunResult) -> RunResult:
    """`run` (a valid run, failed parts already withheld) with every speed worked out from
    its samples: statistics, calls per second, rates, scaling points' medians and, where
    the run has one, the subjects' comparison (dropped without work counts to compare by)."""
    measurements = [restated(m) for m in run.measurements]
    update: dict[str, Any] = {"measurements": measurements}
    if run.rates is not None:
        update["rates"] = rates_at(run.rates, measurements)
    if run.scaling is not None:
        points = [
            p.model_copy(update={"median_s": statistics.median(p.samples_s)})
            if p.samples_s
            else p.model_copy(update={"median_s": None})
            for p in run.scaling.points
        ]
        update["scaling"] = run.scaling.model_copy(update={"points": points})
    if "comparison" in run.extra:
        extra = dict(run.extra)
        if run.rates is not None:
            extra["comparison"] = comparison(measurements, run.rates)
        else:
            del extra["comparison"]
        update["extra"] = extra
    return run.model_copy(update=update)
