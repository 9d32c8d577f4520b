"""The JAX path's execute stage: inputs placed on the device and ready, an uncounted
warm-up, samples under the job's mode (profiled when the job asks), then the output
judged against its float64 reference (`Workload.checker`) before any speed is presented."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from workers.catalog.arithmetic import Arithmetic, phrase
from workers.catalog.base import WorkloadParams
from workers.measure import harness
from workers.measure.device_time import DEVICE_CALLS, module_name, profiled_pass
from workers.measure.profile import OVERHEAD_WARNING, ProfileCapture
from workers.measure.publish import Measured
from workers.measure.stats import summarize
from workers.protocol import (
    MAX_DEVICE_OPS,
    BoundaryId,
    Correctness,
    DeviceOp,
    DeviceTime,
    Measurement,
    Mode,
)
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
    _device_time(measured, lambda: ready(compiled(*args)), device, sampled.measurements)
    unreported["device_time"] = clock() - t0
    t0 = clock()
    output = harness.host_copy(sampled.output) if scaled is None else scaled.to_host(sampled.output)
    correctness = _judged(workload, params, host_inputs, output, program.arithmetic)
    unreported["check"] = clock() - t0
    emit("checked", message="passed" if correctness.passed else correctness.detail)
    return correctness


def _judged(
    workload: Workload[Any],
    params: WorkloadParams,
    host_inputs: Any,
    output: Any,
    arithmetic: Arithmetic | None,
) -> Correctness:
    """The output against its reference, allowing for the arithmetic the program's float32
    products ran at (the verdict names it; the server recomputes or bounds it)."""
    judge = getattr(workload, "judge", None)
    if judge is not None:  # a workload that picks its own reference, or has none
        verdict: Correctness = judge(params, host_inputs, output, arithmetic=arithmetic)
    else:
        verdict = workload.checker(params, host_inputs, arithmetic)(output)
    if arithmetic is None:
        return verdict
    return verdict.model_copy(
        update={"arithmetic": arithmetic.value, "arithmetic_words": phrase(arithmetic)}
    )


def _device_time(
    measured: Measured, call: Callable[[], Any], device: Any, taken: list[Measurement]
) -> None:
    """On a TPU or a GPU, the program's own span on the device per call, from a profiled
    pass after the timed samples (`workers.measure.device_time`): its samples under the
    boundary `device-time` and each instruction's median. Nothing on a CPU."""
    module = module_name(measured.artifacts.hlo)
    if str(getattr(device, "platform", "cpu")) == "cpu" or module is None or not taken:
        return
    calls = min(DEVICE_CALLS, max(len(m.samples_s) for m in taken))
    times = profiled_pass(call, module, calls)
    if times is None:
        measured.warnings.append(
            f"device-time: the profiler's trace held no span of {module} on a device plane, "
            "so this run has no device time."
        )
        return
    measured.measurements.append(
        Measurement(
            boundary=BoundaryId.DEVICE_TIME,
            samples_s=times.spans_s,
            stats=summarize(times.spans_s),
            note="the program's span on the device per call, from a profiled pass after the "
            "timed samples (jax.profiler, the device plane's XLA Modules line)",
        )
    )
    ops = [DeviceOp(name=o.name, median_s=o.median_s, calls=o.calls) for o in times.ops]
    measured.device_time = DeviceTime(
        planes=times.planes, calls=len(times.spans_s), ops=ops[:MAX_DEVICE_OPS]
    )
