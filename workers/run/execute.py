"""The JAX path's execute stage: inputs placed on the device and ready, an uncounted
warm-up, samples under the job's mode (profiled when the job asks), then the output
judged against its float64 reference (`Workload.checker`) before any speed is presented."""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from workers.catalog.base import WorkloadParams
from workers.measure import harness
from workers.measure.profile import OVERHEAD_WARNING, ProfileCapture
from workers.measure.publish import Measured
from workers.protocol import Correctness, Mode
from workers.run.base import SEED, Progress, emitter
from workers.run.program import Program
from workers.workloads.base import Workload


def execute(
    measured: Measured,
    program: Program,
    workload: Workload[Any],
    params: WorkloadParams,
    *,
    device: Any,
    progress: Progress | None,
) -> Correctness:
    """Place the inputs, warm up, sample under the job's mode, then judge the output."""
    clock = time.perf_counter
    options, scaled, compiled = measured.job.measure, program.scaled, program.compiled
    if measured.no_speed is not None:
        # Its times are no speed (Pallas interpret mode): one warm-up and one call, for the
        # output the check judges, not a sample series no one may see.
        options = options.model_copy(update={"samples": 1, "warmup": 1, "profile": False})
        measured.extra["sampled"] = "once, for the correctness check: " + measured.no_speed
    unreported = measured.unreported if measured.unreported is not None else {}
    emit = emitter(progress)
    t0 = clock()
    host_inputs = workload.make_inputs(params, np.random.default_rng(SEED))
    unreported["inputs"] = clock() - t0
    t0 = clock()
    # One device, the shardings an exported function was exported with, or a scale
    # workload's shards.
    placement = program.shardings or device
    if scaled is None:
        args = harness.block_all(jax.device_put(host_inputs, placement))
    else:
        args = scaled.place(host_inputs)
        placement = scaled.in_shardings
    unreported["placement"] = clock() - t0
    emit("warm-up")
    t0 = clock()
    ready = harness.readiness(harness.warm_up(compiled, args, options.warmup))
    warmed = ["call"]
    if options.mode is Mode.APPLICATION:  # the transfers are sampled too: warm them as well
        warmed = harness.warm_up_transfers(compiled, host_inputs, placement, options.warmup)
    measured.stage_seconds.warm_up = clock() - t0
    measured.extra["warmed"] = {"calls": options.warmup, "covers": warmed}
    capture = ProfileCapture(options.profile).start()  # a no-op unless measure.profile
    sampled = harness.sample(
        options.mode,
        compiled,
        args=args,
        host_inputs=host_inputs,
        device=placement,
        options=options,
        progress=progress,
        ready=ready,
    )
    measured.profile = capture.finish(sampled.measurements, options.mode, str(device.device_kind))
    measured.warnings.extend(capture.warnings + ([OVERHEAD_WARNING] if measured.profile else []))
    measured.measurements = sampled.measurements
    measured.warnings.extend(sampled.warnings)
    unreported["untimed_work"] = sampled.untimed_s
    t0 = clock()
    output = harness.host_copy(sampled.output) if scaled is None else scaled.to_host(sampled.output)
    judge = getattr(workload, "judge", None)
    if judge is not None:  # a workload that picks its own reference, or has none
        correctness: Correctness = judge(params, host_inputs, output)
    else:
        correctness = workload.checker(params, host_inputs)(output)
    unreported["check"] = clock() - t0
    emit("checked", message="passed" if correctness.passed else correctness.detail)
    return correctness
