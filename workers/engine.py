"""The bench engine: one job through trace → lower → compile → execute, as one run.

`run_job` is the entry point the CLI and the worker's runner call. It follows the
measurement contract in DESIGN.md: parameters validated before anything runs, the
requested path checked against the devices actually present, each compile-side stage
timed on its own under a stated cache policy, inputs placed and ready before any timer
starts, an uncounted warm-up, samples under exactly one boundary each, and an output
checked against a float64 reference before any speed is presented.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from workers import harness
from workers.catalog import DEFAULT_MAX_BYTES, CatalogError, parse_params
from workers.catalog.base import WorkloadParams
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.compile_cache import (
    apply_cache_policy,
    cache_counts,
    default_cache_dir,
    events_between,
)
from workers.correctness import check_output
from workers.environment import (
    available_paths,
    describe_devices,
    detect_environment,
    devices_by_platform,
)
from workers.ir import summarize_hlo
from workers.jaxtyped import shape_dtype_struct
from workers.profile import OVERHEAD_WARNING, ProfileCapture
from workers.protocol import (
    PATH_PLATFORM,
    Artifacts,
    BoundaryId,
    CostAnalysis,
    InputInfo,
    JobSpec,
    Measurement,
    MemoryAnalysis,
    Mode,
    PathId,
    ProgressEvent,
    ProgressPhase,
    Rates,
    RunResult,
    StageId,
    StageSeconds,
)
from workers.scale.prepare import prepare as prepare_scale
from workers.scale.report import attach_scale
from workers.source import workload_source
from workers.sweep import run_sweep
from workers.workloads import JaxFunction, get_workload

__all__ = [
    "DEFAULT_MAX_BYTES",
    "SEED",
    "CatalogError",
    "PathUnavailable",
    "available_paths",
    "detect_environment",
    "run_job",
    "select_devices",
]

SEED = 0
"""Seed of the input generator: the same job always sees the same inputs."""

MAIN_BOUNDARY: dict[Mode, BoundaryId | None] = {
    Mode.LATENCY: BoundaryId.HOST_SYNC,
    Mode.THROUGHPUT: BoundaryId.HOST_THROUGHPUT,
    Mode.APPLICATION: BoundaryId.APPLICATION,
    Mode.DISPATCH: None,  # dispatch time is never a speed
}
"""The boundary whose median the achieved rates are computed from."""

WITHHELD = "withheld: the output failed the correctness check, so these times are no result"

Progress = Callable[[ProgressEvent], None]


class PathUnavailable(ValueError):
    """The job's path needs devices (or tools) this process does not have."""


def select_devices(path: PathId) -> list[Any]:
    """The devices that serve `path` here, or PathUnavailable naming what was found."""
    if path is PathId.CUDA:
        raise PathUnavailable(
            "path cuda runs hand-written kernels through CuPy (workers.cuda), not on JAX "
            "devices; run_job sends it there"
        )
    platform = PATH_PLATFORM[path].value
    found = devices_by_platform()
    devices = found.get(platform)
    if not devices:
        raise PathUnavailable(
            f"path {path.value} needs a {platform} device; "
            f"this process has: {describe_devices(found)}"
        )
    return devices


@functools.lru_cache(maxsize=32)
def _jitted(workload: str, params: WorkloadParams) -> Any:
    """The jitted function of a workload, kept so the `warm` policy can reuse its caches."""
    function: JaxFunction = get_workload(workload).function(params)
    return jax.jit(function)


def _cost_analysis(compiled: Any) -> CostAnalysis | None:
    try:
        raw = compiled.cost_analysis()
    except (NotImplementedError, RuntimeError, ValueError):
        return None
    if isinstance(raw, list):  # older jax returned one dict per program
        raw = raw[0] if raw else None
    if not isinstance(raw, dict):
        return None

    def pick(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if isinstance(value, int | float) and value >= 0 else None

    return CostAnalysis(flops=pick("flops"), bytes_accessed=pick("bytes accessed"))


def _memory_analysis(compiled: Any) -> MemoryAnalysis | None:
    try:
        stats = compiled.memory_analysis()
    except (NotImplementedError, RuntimeError, ValueError):
        return None
    if stats is None:
        return None

    def size(name: str) -> int | None:
        value = getattr(stats, name, None)
        return int(value) if isinstance(value, int) and value >= 0 else None

    return MemoryAnalysis(
        argument_bytes=size("argument_size_in_bytes"),
        output_bytes=size("output_size_in_bytes"),
        temp_bytes=size("temp_size_in_bytes"),
        peak_bytes=size("peak_memory_in_bytes"),
    )


def _withhold(measurements: list[Measurement]) -> list[Measurement]:
    """The same samples with their statistics removed: an invalid run shows no speed."""
    return [m.model_copy(update={"stats": None, "note": WITHHELD}) for m in measurements]


def _rates(flops: float, moved: float, mode: Mode, measurements: list[Measurement]) -> Rates:
    rates = Rates(flops=flops, bytes=moved)
    boundary = MAIN_BOUNDARY[mode]
    main = next((m for m in measurements if m.boundary is boundary), None)
    if main is None or main.stats is None or main.stats.median <= 0:
        return rates
    rates.boundary = boundary
    rates.flops_per_s = flops / main.stats.median if flops > 0 else None
    rates.bytes_per_s = moved / main.stats.median if moved > 0 else None
    return rates


def _reported_seconds(stages: StageSeconds, measurements: list[Measurement]) -> float:
    """The time inside every interval the run reports (stages and all samples)."""
    parts = (stages.trace, stages.lower, stages.compile, stages.warm_up)
    total = sum(s for s in parts if s is not None)
    for m in measurements:
        total += sum(m.samples_s) * m.calls_per_sample
    return total


def run_job(
    job: JobSpec,
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    perturb: float | None = None,
    files_dir: Path | None = None,
) -> RunResult:
    """Run `job` (a protocol.JobSpec) on this process's devices and return its run.

    Raises CatalogError for an unknown workload or parameters out of bounds, and
    PathUnavailable when the job's path needs devices this process lacks. `cache_dir`
    is the persistent compilation cache (default ~/.cache/boundary/jax); `max_bytes`
    caps the job's input and output bytes. `perturb` is for tests only: it scales the
    output by (1 + perturb) before the correctness check, so a wrong answer can be shown
    to fail it and hide the speed. `files_dir` holds stored files by SHA-256 (an
    exported function's artifact and .npz archives; see workers.workloads.exported).
    """
    started = time.perf_counter()
    clock = time.perf_counter

    def emit(phase: ProgressPhase, **fields: Any) -> None:
        if progress is not None:
            progress(ProgressEvent(phase=phase, **fields))

    params = parse_params(job.workload, job.params, max_bytes)
    if job.path not in params.paths:
        offered = ", ".join(p.value for p in params.paths)
        raise CatalogError(
            f"path: {job.workload} does not run on {job.path.value} (it runs on: {offered})", "path"
        )
    extra_stages = [s.value for s in job.stages if s not in params.stages]
    if extra_stages:
        offered = ", ".join(s.value for s in params.stages)
        raise CatalogError(
            f"stages: {job.workload} does not offer {', '.join(extra_stages)} (offered: {offered})",
            "stages",
        )
    if job.path is PathId.CUDA:  # hand-written kernels: compiled by nvcc, run through CuPy
        from workers.cuda.job import run_cuda_job

        return run_cuda_job(job, params, progress, cache_dir=cache_dir, perturb=perturb)
    devices = select_devices(job.path)
    device = devices[0]
    if isinstance(params, ShapeSweepParams):  # many shapes through one function: its own loop
        return run_sweep(job, params, devices, progress, cache_dir=cache_dir, perturb=perturb)
    if params.devices() > len(devices):
        # Never run on fewer devices than asked: a mesh of 8 on 1 device is another program.
        raise PathUnavailable(
            f"params.devices: {job.workload} spans {params.devices()} devices; this process "
            f"has {len(devices)} {PATH_PLATFORM[job.path].value} device(s)"
        )
    workload = get_workload(job.workload)
    bind = getattr(workload, "bind", None)
    if bind is not None:
        # A workload that reads stored files (an exported function) loads and checks them
        # for this path before anything is traced; it refuses with a CatalogError.
        workload = bind(params, job.path, files_dir, max_bytes)
    options = job.measure
    specs = workload.input_specs(params)
    unreported: dict[str, float] = {}

    # --- compile side: trace, lower and compile, each timed on its own -----------------
    apply_cache_policy(options.cache, cache_dir or default_cache_dir())
    scaled = prepare_scale(workload, params, devices)  # None unless a scale workload
    if scaled is None:
        jitted = _jitted(job.workload, params)
        sharding = jax.sharding.SingleDeviceSharding(device)
        abstract = [
            shape_dtype_struct(s.shape, jnp.dtype(s.dtype), sharding=sharding) for s in specs
        ]
    else:
        jitted, abstract = scaled.jitted, scaled.abstract
    before = cache_counts()
    t0 = clock()
    traced = jitted.trace(*abstract)
    trace_s = clock() - t0
    emit("traced")
    t0 = clock()
    lowered = traced.lower()
    lower_s = clock() - t0
    emit("lowered")
    t0 = clock()
    compiled = lowered.compile()
    compile_s = clock() - t0
    cache_events = events_between(before, cache_counts())
    emit("compiled")
    stage_seconds = StageSeconds(trace=trace_s, lower=lower_s, compile=compile_s)

    t0 = clock()
    hlo = compiled.as_text()
    # Source positions on: the jaxpr's `# file:line` notes and StableHLO's loc(...) let the
    # page link each line to the source line it came from (the view folds them).
    artifacts = Artifacts(
        jaxpr=traced.jaxpr.pretty_print(source_info=True),
        stablehlo=lowered.as_text(debug_info=True),
        hlo=hlo,
    )
    summary = summarize_hlo(hlo) if hlo else None
    source = workload_source(workload)
    unreported["artifacts"] = clock() - t0

    flops = workload.flop_count(params)
    moved = workload.byte_count(params)
    counts_source = "analytic"
    if getattr(workload, "counts_from_xla", False):
        cost = _cost_analysis(compiled)
        flops = cost.flops if cost is not None and cost.flops is not None else 0.0
        counts_source = "FLOPs from XLA's cost analysis; bytes: arguments + results"
    measurements: list[Measurement] = []
    warnings: list[str] = []
    from workers.cuda.job import jax_path_notes  # options that only the cuda path reads

    warnings.extend(jax_path_notes(job))
    correctness = None
    rates = Rates(flops=flops, bytes=moved)
    profile = None

    # --- execute: inputs placed and ready, warm-up, samples, then the check -------------
    if StageId.EXECUTE in job.stages:
        t0 = clock()
        host_inputs = workload.make_inputs(params, np.random.default_rng(SEED))
        unreported["inputs"] = clock() - t0
        t0 = clock()
        if scaled is None:
            args = harness.block_all(jax.device_put(host_inputs, device))
        else:
            args = scaled.place(host_inputs)
        unreported["placement"] = clock() - t0
        emit("warm-up")
        t0 = clock()
        harness.warm_up(compiled, args, options.warmup)
        stage_seconds.warm_up = clock() - t0
        capture = ProfileCapture(options.profile).start()  # a no-op unless measure.profile
        sampled = harness.sample(
            options.mode,
            compiled,
            args=args,
            host_inputs=host_inputs,
            device=device if scaled is None else scaled.in_shardings,
            options=options,
            progress=progress,
        )
        profile = capture.finish(sampled.measurements, options.mode, str(device.device_kind))
        warnings.extend(capture.warnings + ([OVERHEAD_WARNING] if profile else []))
        measurements = sampled.measurements
        warnings.extend(sampled.warnings)
        unreported["untimed_work"] = sampled.untimed_s
        t0 = clock()
        output = np.asarray(sampled.output) if scaled is None else scaled.to_host(sampled.output)
        if perturb is not None:
            output = output.astype(np.float64) * (1.0 + perturb)
        judge = getattr(workload, "judge", None)
        if judge is not None:  # a workload that picks its own reference, or has none
            correctness = judge(params, host_inputs, output)
        else:
            reference = workload.reference(params, host_inputs)
            correctness = check_output(output, reference, workload.tolerance(params))
        unreported["check"] = clock() - t0
        emit("checked", message="passed" if correctness.passed else correctness.detail)
        if correctness.passed or not correctness.checked:
            rates = _rates(flops, moved, options.mode, measurements)
            rates.source = counts_source
            warnings.extend(sampled.spread_warnings)
            if not correctness.checked:
                warnings.append(f"{correctness.detail}: these timings are of an unverified output.")
        else:
            measurements = _withhold(measurements)
            warnings.append(
                f"correctness failed ({correctness.detail}): the timings are no result."
            )

    # An unchecked output (nothing to compare with) is no failure: its timings stand.
    valid = correctness is None or correctness.passed or not correctness.checked
    environment = detect_environment(device, options.cache, cache_events, devices)
    result = RunResult(
        job=job,
        params=params.model_dump(mode="json"),
        inputs=[InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in specs],
        stage_seconds=stage_seconds,
        artifacts=artifacts,
        hlo_summary=summary,
        cost_analysis=_cost_analysis(compiled),
        memory_analysis=_memory_analysis(compiled),
        measurements=measurements,
        correctness=correctness,
        rates=rates,
        environment=environment,
        warnings=warnings,
        valid=valid,
        extra={"seed": SEED},
        profile=profile,
        source=source,
    )
    if scaled is not None:
        t0 = clock()
        attach_scale(result, scaled, compiled, job, devices, seed=SEED, progress=progress)
        unreported["scale"] = clock() - t0
    elapsed = time.perf_counter() - started
    result.harness_seconds = max(0.0, elapsed - _reported_seconds(stage_seconds, measurements))
    # What is left once the workload's own untimed work is named: the harness's bookkeeping.
    unreported["bookkeeping"] = result.harness_seconds - sum(unreported.values())
    result.extra["unreported_s"] = unreported
    emit("done")
    return result
