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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from workers.catalog import DEFAULT_MAX_BYTES, CatalogError, check_live_outputs, parse_params
from workers.catalog.base import WorkloadParams
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.catalog.target_rules import byte_cap
from workers.compiler.compile_cache import (
    apply_cache_policy,
    cache_counts,
    default_cache_dir,
    events_between,
)
from workers.compiler.environment import (
    available_paths,
    describe_devices,
    detect_environment,
    devices_by_platform,
)
from workers.compiler.hlo_summary import compiled_costs, summarize_hlo
from workers.compiler.pipeline import capture_pipeline, max_bytes_from_env
from workers.compiler.source import workload_source
from workers.measure import harness
from workers.measure.correctness import check_output
from workers.measure.profile import OVERHEAD_WARNING, ProfileCapture
from workers.measure.publish import Measured, RateBasis, Work
from workers.protocol import (
    PATH_PLATFORM,
    Artifacts,
    BoundaryId,
    CacheEvents,
    Correctness,
    HloSummary,
    InputInfo,
    JobSpec,
    MemoryAnalysis,
    Mode,
    PathId,
    PipelineCapture,
    ProgressEvent,
    ProgressPhase,
    RunResult,
    StageId,
    StageSeconds,
)
from workers.run.stages import single_device_inputs, trace_and_lower
from workers.run.sweep import run_sweep
from workers.scale.attach import attach_scale
from workers.scale.prepare import Prepared
from workers.scale.prepare import prepare as prepare_scale
from workers.workloads import JaxFunction, get_workload
from workers.workloads.base import Workload

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


@dataclass
class _Program:
    """The job's program, traced, lowered and compiled, with what the stages produced."""

    compiled: Any
    scaled: Prepared | None
    stage_seconds: StageSeconds
    cache_events: CacheEvents | None
    artifacts: Artifacts
    summary: HloSummary | None
    artifacts_s: float
    """Untimed: printing the IR and summarizing the optimized HLO."""
    pipeline: PipelineCapture | None = None


def _validate(job: JobSpec, max_bytes: int) -> WorkloadParams:
    """The job's parameters, checked against its path and stages; CatalogError if not."""
    params = parse_params(job.workload, job.params, byte_cap(job, max_bytes))
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
    check_live_outputs(params, job.measure, max_bytes)
    return params


def _bind(
    job: JobSpec, params: WorkloadParams, files_dir: Path | None, max_bytes: int
) -> Workload[Any]:
    """The workload, readied for this job (an exported function loads its files here)."""
    workload: Workload[Any] = get_workload(job.workload)
    bind = getattr(workload, "bind", None)
    if bind is not None:
        # A workload that reads stored files (an exported function) loads and checks them
        # for this path before anything is traced; it refuses with a CatalogError.
        bound: Workload[Any] = bind(params, job.path, files_dir, max_bytes)
        return bound
    return workload


def _compile(
    job: JobSpec,
    workload: Workload[Any],
    params: WorkloadParams,
    devices: list[Any],
    *,
    cache_dir: Path | None,
    emit: Callable[..., None],
) -> _Program:
    """Trace, lower and compile under the job's cache policy, each stage timed alone."""
    clock = time.perf_counter
    apply_cache_policy(job.measure.cache, cache_dir or default_cache_dir())
    scaled = prepare_scale(workload, params, devices)  # None unless a scale workload
    if scaled is None:
        jitted = _jitted(job.workload, params)
        abstract = single_device_inputs(workload, params, devices[0])
    else:
        jitted, abstract = scaled.jitted, scaled.abstract
    before = cache_counts()
    staged = trace_and_lower(jitted, abstract, emit)
    traced, lowered, trace_s, lower_s = (
        staged.traced,
        staged.lowered,
        staged.trace_s,
        staged.lower_s,
    )
    t0 = clock()
    compiled = lowered.compile()
    compile_s = clock() - t0
    cache_events = events_between(before, cache_counts())
    emit("compiled")
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
    artifacts_s = clock() - t0
    pipeline = None
    if job.measure.pipeline:  # a second compile, after the timed one: the dump costs no time
        pipeline = capture_pipeline(lowered, max_bytes_from_env())
        emit("compiled", message="pass pipeline captured")
    return _Program(
        compiled=compiled,
        scaled=scaled,
        stage_seconds=StageSeconds(trace=trace_s, lower=lower_s, compile=compile_s),
        cache_events=cache_events,
        artifacts=artifacts,
        summary=summary,
        artifacts_s=artifacts_s,
        pipeline=pipeline,
    )


def _work(workload: Workload[Any], params: WorkloadParams, compiled: Any) -> Work:
    """The work one call does: analytic counts, or XLA's where the workload has none."""
    moved = workload.byte_count(params)
    if getattr(workload, "counts_from_xla", False):
        cost = compiled_costs(compiled)
        flops = cost.flops if cost is not None and cost.flops is not None else 0.0
        return Work(flops, moved, "FLOPs from XLA's cost analysis; bytes: arguments + results")
    return Work(workload.flop_count(params), moved)


def _execute(
    measured: Measured,
    program: _Program,
    workload: Workload[Any],
    params: WorkloadParams,
    *,
    device: Any,
    progress: Progress | None,
) -> Correctness:
    """Place the inputs, warm up, sample under the job's mode, then judge the output."""
    clock = time.perf_counter
    options, scaled, compiled = measured.job.measure, program.scaled, program.compiled
    unreported = measured.unreported if measured.unreported is not None else {}
    emit = _emitter(progress)
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
    warmed = ["call"]
    if options.mode is Mode.APPLICATION:  # the transfers are sampled too: warm them as well
        target = device if scaled is None else scaled.in_shardings
        warmed = harness.warm_up_transfers(compiled, host_inputs, target, options.warmup)
    measured.stage_seconds.warm_up = clock() - t0
    measured.extra["warmed"] = {"calls": options.warmup, "covers": warmed}
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
    measured.profile = capture.finish(sampled.measurements, options.mode, str(device.device_kind))
    measured.warnings.extend(capture.warnings + ([OVERHEAD_WARNING] if measured.profile else []))
    measured.measurements = sampled.measurements
    measured.warnings.extend(sampled.warnings)
    measured.spread_warnings.extend(sampled.spread_warnings)
    unreported["untimed_work"] = sampled.untimed_s
    t0 = clock()
    output = np.asarray(sampled.output) if scaled is None else scaled.to_host(sampled.output)
    judge = getattr(workload, "judge", None)
    if judge is not None:  # a workload that picks its own reference, or has none
        correctness: Correctness = judge(params, host_inputs, output)
    else:
        reference = workload.reference(params, host_inputs)
        correctness = check_output(output, reference, workload.tolerance(params))
    unreported["check"] = clock() - t0
    emit("checked", message="passed" if correctness.passed else correctness.detail)
    return correctness


def _emitter(progress: Progress | None) -> Callable[..., None]:
    def emit(phase: ProgressPhase, **fields: Any) -> None:
        if progress is not None:
            progress(ProgressEvent(phase=phase, **fields))

    return emit


def run_job(
    job: JobSpec,
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    files_dir: Path | None = None,
) -> RunResult:
    """Run `job` (a protocol.JobSpec) on this process's devices and return its run.

    Raises CatalogError for an unknown workload or parameters out of bounds, and
    PathUnavailable when the job's path needs devices this process lacks. `cache_dir`
    is the persistent compilation cache (default ~/.cache/boundary/jax); `max_bytes`
    caps the job's input and output bytes. `files_dir` holds stored files by SHA-256 (an
    exported function's artifact and .npz archives; see workers.workloads.exported).
    """
    started = time.perf_counter()
    emit = _emitter(progress)
    from workers.catalog.target_rules import apply_target, job_target

    job = apply_target(job)  # a target's pairing and device count; CatalogError if they clash
    target = job_target(job)
    params = _validate(job, max_bytes)
    if job.path is PathId.CUDA:  # hand-written kernels: compiled by nvcc, run through CuPy
        from workers.run.cuda import run_cuda_job

        return run_cuda_job(job, params, progress, cache_dir=cache_dir, target=target)
    if target is not None:
        from workers.run.deviceless import real_devices, run_deviceless

        found = real_devices(target)
        if found is None:  # no such devices here: compile for them, never run
            return run_deviceless(job, params, target, progress, cache_dir=cache_dir)
        devices = found
    else:
        devices = select_devices(job.path)
    device = devices[0]
    if isinstance(params, ShapeSweepParams):  # many shapes through one function: its own loop
        return run_sweep(job, params, devices, progress, cache_dir=cache_dir)
    if params.devices() > len(devices):
        # Never run on fewer devices than asked: a mesh of 8 on 1 device is another program.
        raise PathUnavailable(
            f"params.devices: {job.workload} spans {params.devices()} devices; this process "
            f"has {len(devices)} {PATH_PLATFORM[job.path].value} device(s)"
        )
    workload = _bind(job, params, files_dir, max_bytes)
    program = _compile(job, workload, params, devices, cache_dir=cache_dir, emit=emit)
    memory = _memory_analysis(program.compiled)
    if params.output_bytes() is None and memory is not None:
        # The parameters could not say how big an output is; the compiled program can.
        check_live_outputs(params, job.measure, max_bytes, memory.output_bytes)
    from workers.run.cuda import jax_path_notes  # options that only the cuda path reads

    boundary = MAIN_BOUNDARY[job.measure.mode]
    measured = Measured(
        job=job,
        params=params.model_dump(mode="json"),
        environment=detect_environment(device, job.measure.cache, program.cache_events, devices),
        started=started,
        inputs=[
            InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype)
            for s in workload.input_specs(params)
        ],
        stage_seconds=program.stage_seconds,
        artifacts=program.artifacts,
        hlo_summary=program.summary,
        cost_analysis=compiled_costs(program.compiled),
        memory_analysis=memory,
        work=_work(workload, params, program.compiled),
        rate_basis=RateBasis(boundary) if boundary is not None else None,
        warnings=jax_path_notes(job),
        extra={"seed": SEED},
        unreported={"artifacts": program.artifacts_s},
        source=workload_source(workload),
        pipeline=program.pipeline,
    )
    correctness = None
    if StageId.EXECUTE in job.stages:
        correctness = _execute(
            measured, program, workload, params, device=device, progress=progress
        )
    if program.scaled is not None:
        assert measured.unreported is not None
        t0 = time.perf_counter()
        attach_scale(
            measured, program.scaled, program.compiled, job, devices, seed=SEED, progress=progress
        )
        measured.unreported["scale"] = time.perf_counter() - t0
    if target is not None:
        from workers.run.deviceless import hardware_report

        measured.target = hardware_report(target, device)
    result = measured.check(correctness).publish()
    emit("done")
    return result
