"""The bench engine: one job through trace → lower → compile → execute, as one run.

`run_job` is the entry point the CLI and the worker's runner call. It follows the
measurement contract in DESIGN.md: parameters validated before anything runs, the
requested path checked against the devices actually present, each compile-side stage
timed on its own under a stated cache policy, inputs placed and ready before any timer
starts, an uncounted warm-up, samples under exactly one boundary each, and an output
checked against a float64 reference before any speed is presented.

It hands a job to its runner: the cuda path to `workers.run.cuda`, a target whose
devices are not here to `workers.run.deviceless`, a shape sweep to `workers.run.sweep`;
the JAX path it runs itself, through `workers.run.program` and `workers.run.execute`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from workers.catalog import CatalogError, check_live_outputs, check_peak, parse_params
from workers.catalog.base import WorkloadParams
from workers.catalog.job_limit import host_job_bytes
from workers.catalog.kernels import (
    INTERPRET_WARNING,
    KernelChoice,
    kernel_reading,
    kernel_record,
    public_params,
)
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.catalog.target_rules import apply_target, byte_cap, job_kernel, job_target
from workers.compiler.analysis import memory_analysis
from workers.compiler.environment import describe_devices, detect_environment, devices_by_platform
from workers.compiler.source import workload_source
from workers.measure.publish import Measured, RateBasis
from workers.pallas.lowering import arch_conflict, real_gpu
from workers.protocol import (
    MAIN_BOUNDARY,
    PATH_PLATFORM,
    BoundaryId,
    Dumps,
    InputInfo,
    JobSpec,
    PathId,
    RunResult,
    StageId,
    Target,
)
from workers.protocol.hlo_summary import compiled_costs
from workers.protocol.targets import own_target, parse_target
from workers.run.base import SEED, PathUnavailable, Progress, emitter
from workers.run.execute import execute
from workers.run.program import compile_program, work_of
from workers.run.stages import bind_workload
from workers.run.sweep import run_sweep
from workers.scale.attach import attach_scale

__all__ = ["PathUnavailable", "jax_path_notes", "run_job", "select_devices"]


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


def _validate(job: JobSpec, max_bytes: int) -> tuple[WorkloadParams, KernelChoice]:
    """The job's parameters, checked against its path and stages, and the implementation
    it asks for (`kernel`); CatalogError if not."""
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
    check_peak(params, job, byte_cap(job, max_bytes))
    return params, job_kernel(job, params)


def jax_path_notes(job: JobSpec) -> list[str]:
    """Warnings for a JAX-path job that sets options only the cuda path reads."""
    notes = []
    asked = job.params.get("kernel")
    if job.path is not PathId.CUDA and asked is not None and str(asked) not in ("xla", "pallas"):
        notes.append(
            f"params.kernel={asked} names a hand-written CUDA kernel, which only the cuda "
            f"path runs; on {job.path.value} it reads as {kernel_reading(job.path.value, asked)}: "
            "XLA chose its own kernels."
        )
    if job.path is not PathId.CUDA and job.measure.flush_l2:
        notes.append("measure.flush_l2 applies only to the cuda path; no cache was flushed.")
    return notes


def run_job(
    job: JobSpec,
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
    max_bytes: int | None = None,
    files_dir: Path | None = None,
) -> RunResult:
    """Run `job` (a protocol.JobSpec) on this process's devices and return its run.

    Raises CatalogError for an unknown workload or parameters out of bounds, and
    PathUnavailable when the job's path needs devices this process lacks. `cache_dir`
    is the persistent compilation cache (default ~/.cache/boundary/jax); `max_bytes`
    caps the job's estimated peak memory (default: this host's job limit,
    workers.catalog.job_limit). `files_dir` holds stored files by SHA-256 (an
    exported function's artifact and .npz archives; see workers.workloads.exported).
    """
    started = time.perf_counter()
    job = apply_target(job)  # a target's pairing and device count; CatalogError if they clash
    max_bytes = host_job_bytes() if max_bytes is None else max_bytes
    params, choice = _validate(job, max_bytes)
    elsewhere = _run_elsewhere(
        job,
        params,
        choice,
        progress=progress,
        cache_dir=cache_dir,
        max_bytes=max_bytes,
        files_dir=files_dir,
    )
    if elsewhere is not None:
        return elsewhere
    target = job_target(job)
    devices = (real_devices_for(target) if target is not None else None) or select_devices(job.path)
    if choice.pallas and job.path is PathId.JAX_GPU and target is None:
        # The GPU is known now: a Mosaic GPU kernel is built for its compute capability.
        choice = job_kernel(job, params, real_gpu(devices[0]))
    if isinstance(params, ShapeSweepParams):  # many shapes through one function: its own loop
        return run_sweep(job, params, devices, progress, cache_dir=cache_dir)
    return _run_here(
        job,
        params,
        choice,
        devices,
        started=started,
        progress=progress,
        cache_dir=cache_dir,
        max_bytes=max_bytes,
        files_dir=files_dir,
    )


def real_devices_for(target: Target) -> list[Any] | None:
    """The target's devices when this process has them for real."""
    from workers.run.deviceless import real_devices

    return real_devices(target)


def _run_elsewhere(
    job: JobSpec,
    params: WorkloadParams,
    choice: KernelChoice,
    *,
    progress: Progress | None,
    cache_dir: Path | None,
    max_bytes: int,
    files_dir: Path | None,
) -> RunResult | None:
    """The run of a job that this module does not run itself: the cuda path, a Mosaic GPU
    kernel for another architecture (in its own process), a follow-up's dumps, a target
    whose devices are not here (compiled without them). None: it runs here."""
    target = job_target(job)
    if job.path is PathId.CUDA:  # hand-written kernels: compiled by nvcc, run through CuPy
        from workers.run.cuda import run_cuda_job

        return run_cuda_job(job, params, progress, cache_dir=cache_dir, target=target)
    if arch_conflict(choice) is not None:  # Mosaic GPU: one GPU architecture per process
        from workers.run.isolated import run_isolated

        return run_isolated(job, cache_dir=cache_dir, max_bytes=max_bytes)
    if target is None:
        return None
    if job.dumps is Dumps.ONLY:  # a follow-up: the dumps alone
        from workers.run.dumps_only import run_dumps

        return run_dumps(
            job, params, target, progress, cache_dir=cache_dir, files_dir=files_dir, choice=choice
        )
    if real_devices_for(target) is None:  # no such devices here: compile for them, never run
        from workers.run.deviceless import run_deviceless

        return run_deviceless(
            job, params, target, progress, cache_dir=cache_dir, files_dir=files_dir, choice=choice
        )
    return None


def _run_here(
    job: JobSpec,
    params: WorkloadParams,
    choice: KernelChoice,
    devices: list[Any],
    *,
    started: float,
    progress: Progress | None,
    cache_dir: Path | None,
    max_bytes: int,
    files_dir: Path | None,
) -> RunResult:
    """A JAX-path job on this process's devices: compile, measure, check, scale."""
    emit = emitter(progress)
    workload = bind_workload(job, params, files_dir, max_bytes)
    spans = workload.devices_spanned(params)
    if spans > len(devices):
        # Never run on fewer devices than asked: a mesh of 8 on 1 device is another program.
        what = "params.devices" if params.devices() > 1 else "params.artifact"
        raise PathUnavailable(
            f"{what}: {job.workload} spans {spans} devices; this process "
            f"has {len(devices)} {PATH_PLATFORM[job.path].value} device(s)"
        )
    program = compile_program(
        job, workload, params, devices, cache_dir=cache_dir, emit=emit, choice=choice
    )
    memory = memory_analysis(program.compiled)
    if params.output_bytes() is None and memory is not None:
        # The parameters could not say how big an output is; the compiled program can.
        check_live_outputs(params, job.measure, max_bytes, memory.output_bytes)
    measured = _measured(
        job, params, choice, workload=workload, program=program, devices=devices, started=started
    )
    correctness = None
    if StageId.EXECUTE in job.stages:
        correctness = execute(
            measured, program, workload, params, device=devices[0], progress=progress
        )
    if program.scaled is not None:
        assert measured.unreported is not None
        t0 = time.perf_counter()
        attach_scale(
            measured, program.scaled, program.compiled, job, devices, seed=SEED, progress=progress
        )
        measured.unreported["scale"] = time.perf_counter() - t0
    _on_the_chip(
        measured,
        job,
        devices[:spans],
        cache_dir=cache_dir,
        files_dir=files_dir,
        max_bytes=max_bytes,
    )
    result = measured.check(correctness).publish()
    emit("done")
    return result


def _on_the_chip(
    measured: Measured,
    job: JobSpec,
    devices: list[Any],
    *,
    cache_dir: Path | None,
    files_dir: Path | None,
    max_bytes: int,
) -> None:
    """A run on real devices names its target: the job's, or on a TPU the chip's own (so
    its page says what the chip is); a TPU run also gets the compile for that target
    without the device beside it (`workers.run.prediction`)."""
    from workers.run.deviceless import hardware_report

    target = job_target(job)
    tpu = str(getattr(devices[0], "platform", "")) == "tpu"
    if target is None and tpu:
        found = own_target(str(devices[0].device_kind), len(devices))
        target = parse_target(found) if found is not None else None
    if target is not None:
        measured.target = hardware_report(target, devices[0])
    if tpu:
        from workers.run.prediction import attach_prediction

        attach_prediction(
            measured, len(devices), cache_dir=cache_dir, files_dir=files_dir, max_bytes=max_bytes
        )


def _measured(
    job: JobSpec,
    params: WorkloadParams,
    choice: KernelChoice,
    *,
    workload: Any,
    program: Any,
    devices: list[Any],
    started: float,
) -> Measured:
    """The compiled program as a run about to be measured: its IR, counts and memory."""
    boundary = MAIN_BOUNDARY[job.measure.mode]
    measured = Measured(
        job=job,
        params=public_params(params, job.path.value),
        environment=detect_environment(
            devices[0], job.measure.cache, program.cache_events, devices
        ),
        started=started,
        inputs=[
            InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype)
            for s in workload.input_specs(params)
        ],
        stage_seconds=program.stage_seconds,
        artifacts=program.artifacts,
        hlo_summary=program.summary,
        cost_analysis=compiled_costs(program.compiled),
        memory_analysis=memory_analysis(program.compiled),
        work=work_of(workload, params, program.compiled),
        # Dispatch time is never a speed: no rates from it.
        rate_basis=RateBasis(boundary) if boundary is not BoundaryId.HOST_DISPATCH else None,
        warnings=jax_path_notes(job),
        extra={"seed": SEED, **({"kernel": kernel_record(choice)} if choice.pallas else {})},
        unreported={"artifacts": program.artifacts_s},
        source=workload_source(workload, choice.pallas),
        pipeline=program.pipeline,
        memory_report=program.memory_report,
        no_speed=INTERPRET_WARNING if choice.interpret else None,
    )
    for name in ("mosaic", "triton", "mosaic_gpu"):  # the kernels' own IR, from the lowering
        setattr(measured.artifacts, name, getattr(program.kernels, name))
    return measured
