"""Scaling series: the same workload over 1, 2, 4, … devices, as one job.

Strong scaling keeps the global workload and spreads it thinner; weak scaling keeps each
device's shard and grows the global workload with the device count. Each point compiles
its own program for a mesh over the first d devices, checks its output, and times whole
steps at the host-sync boundary: from the call until every shard of the output is ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workers.catalog.mesh import MeshError, MeshParams, SeriesMode, series_counts, shard_shape
from workers.compiler.options import CompileOptions
from workers.protocol import MeasureOptions, ProgressEvent, ScalingPoint, ScalingSeries
from workers.protocol.hlo_summary import summarize_hlo
from workers.scale.prepare import prepare
from workers.workloads.scale_base import ScaleWorkload

MAX_POINT_SAMPLES = 50
MIN_POINT_SAMPLES = 3

ONE_CONTROLLER_NOTE = (
    "One process drives every device, so a step is complete when the last shard of its "
    "output is ready: each point records that whole-step completion (host-sync). "
    "{detail}"
)
VIRTUAL_DETAIL = (
    "On one host with virtual CPU devices, per-device times are not separable (the devices "
    "share the host's cores and threads), so no slowest-device time is recorded."
)
DEVICE_DETAIL = (
    "Per-device completion times are not separated here; the whole-step time bounds the "
    "slowest device from above."
)
CPU_LABEL = (
    "jax-cpu, virtual devices: structure real (sharding, collectives, memory), "
    "timings not hardware scaling"
)

Progress = Callable[[ProgressEvent], None]


def _modes(series: SeriesMode) -> list[SeriesMode]:
    if series is SeriesMode.BOTH:
        return [SeriesMode.STRONG, SeriesMode.WEAK]
    return [series]


def run_series(
    workload: ScaleWorkload[Any],
    params: MeshParams,
    devices: Sequence[Any],
    options: MeasureOptions,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    compiler_options: CompileOptions | None = None,
) -> ScalingSeries:
    """Run the series `params.series` asks for over device counts 1, 2, 4, … devices,
    each point compiled with the job's `compiler_options`."""
    platform = devices[0].platform
    wanted = options.sample_count() or 10
    per_point = max(MIN_POINT_SAMPLES, min(wanted, MAX_POINT_SAMPLES))
    counts = series_counts(params.devices())
    modes = _modes(params.series)
    budget = options.max_seconds / max(1, len(counts) * len(modes))
    series = ScalingSeries(
        label=CPU_LABEL
        if platform == "cpu"
        else f"{platform}: {len(devices)} {devices[0].device_kind} devices, timed per step",
        per_device_note=ONE_CONTROLLER_NOTE.format(
            detail=VIRTUAL_DETAIL if platform == "cpu" else DEVICE_DETAIL
        ),
    )
    done = 0
    for mode in modes:
        for count in counts:
            done += 1
            if progress is not None:
                progress(
                    ProgressEvent(
                        phase="sampling",
                        k=done,
                        n=len(counts) * len(modes),
                        message=f"{mode.value} scaling on {count} device(s)",
                    )
                )
            try:
                point_params = params.scaled(count, mode)
            except MeshError as exc:
                series.skipped.append(f"{mode.value} scaling on {count} device(s): {exc}")
                continue
            series.points.append(
                _point(
                    workload,
                    point_params,
                    devices[:count],
                    mode=mode,
                    samples=per_point,
                    budget_s=budget,
                    seed=seed,
                    compiler_options=compiler_options,
                )
            )
    return series


def _point(
    workload: ScaleWorkload[Any],
    params: MeshParams,
    devices: Sequence[Any],
    *,
    mode: SeriesMode,
    samples: int,
    budget_s: float,
    seed: int,
    compiler_options: CompileOptions | None,
) -> ScalingPoint:
    prepared = prepare(workload, params, devices)
    assert prepared is not None  # a ScaleWorkload with MeshParams always prepares
    compiled = prepared.jitted.lower(*prepared.abstract).compile(
        compiler_options=compiler_options or None
    )
    host = workload.make_inputs(params, np.random.default_rng(seed))
    args = prepared.place(host)
    compiled(*args).block_until_ready()  # warm-up, not counted
    clock = time.perf_counter
    times: list[float] = []
    deadline = clock() + budget_s
    while len(times) < samples:
        t0 = clock()
        compiled(*args).block_until_ready()
        t1 = clock()
        times.append(t1 - t0)
        if t1 >= deadline and len(times) >= MIN_POINT_SAMPLES:
            break
    output = prepared.to_host(compiled(*args))
    verdict = workload.checker(params, host)(output)
    sizes = params.axis_sizes()
    kinds = [c.kind for c in summarize_hlo(compiled.as_text() or "").collectives]
    note = None if len(times) == samples else f"time cap reached after {len(times)} samples"
    return ScalingPoint(
        devices=len(devices),
        mode=mode.value,
        mesh_shape=list(params.mesh_shape()),
        global_shapes={layout.name: list(layout.shape) for layout in prepared.layouts},
        per_device_shapes={
            layout.name: list(shard_shape(layout, sizes)) for layout in prepared.layouts
        },
        samples_s=times,
        median_s=float(np.median(times)),
        collectives=kinds,
        correct=verdict.passed,
        error=verdict.error,
        note=note if verdict.passed else verdict.detail,
    )
