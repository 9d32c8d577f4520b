"""A `cuda` job through its stages, as one run: the CUDA path's side of `run_job`.

compile (any machine with nvcc or NVRTC): the workload's kernel source is built for the
target architecture; the run carries the chosen kernel's PTX, its SASS and the resource
report of every kernel it launches, with the compile times.
execute (a machine with an NVIDIA GPU that CuPy can see): see `workers.cuda.launch`.

Asking to execute where no GPU is present is refused before anything is compiled, with
a message naming what was found.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jax
import numpy as np

from workers.catalog import CatalogError
from workers.catalog.base import WorkloadParams
from workers.cuda import env
from workers.cuda.build import BuildFailed, build, cache_root
from workers.cuda.plan import KernelPlan, NoKernel, plan_for
from workers.cuda.sass import disassemble, ptx_for, resources
from workers.environment import describe_devices, host_cpu, jaxlib_version
from workers.protocol import (
    Artifacts,
    BoundaryId,
    CachePolicy,
    Environment,
    InputInfo,
    JobSpec,
    Measurement,
    Mode,
    PathId,
    ProgressEvent,
    ProgressPhase,
    Rates,
    RunResult,
    StageId,
    StageSeconds,
    Target,
    TargetReport,
)
from workers.workloads import get_workload

COMPILE_ONLY_NOTE = (
    "compile only: PTX, SASS and the resource report were produced without a GPU; "
    "executing this kernel needs an NVIDIA GPU (a worker with cuda_run)."
)
DEVICELESS_NOTE = (
    "Compiled without the hardware: the kernel was built for {id} ({name}) on a machine "
    "without such a GPU. PTX, SASS and the resource report are the CUDA compiler's real "
    "output; nothing ran, so there is no time and no correctness check."
)
WITHHELD = "withheld: the output failed the correctness check, so these times are no result"


def jax_path_notes(job: JobSpec) -> list[str]:
    """Warnings for a JAX-path job that sets options only the cuda path reads."""
    notes = []
    if job.path is not PathId.CUDA and "kernel" in job.params:
        notes.append(
            f"params.kernel chooses a hand-written CUDA kernel and applies only to the cuda "
            f"path; on {job.path.value} XLA chose its own kernels."
        )
    if job.path is not PathId.CUDA and job.measure.flush_l2:
        notes.append("measure.flush_l2 applies only to the cuda path; no cache was flushed.")
    return notes


def _unavailable(message: str) -> Exception:
    from workers.engine import PathUnavailable

    return PathUnavailable(message)


def _no_gpu_message(probe: env.GpuProbe, tools: env.CudaTools) -> str:
    compiler = tools.compiler if tools.can_compile else "no CUDA compiler"
    return (
        f"path cuda: executing needs an NVIDIA GPU, and {probe.reason}; "
        f"this machine has JAX devices {describe_devices()} and {compiler}. "
        "Ask for --stages compile to inspect the kernel's PTX and SASS without a GPU."
    )


def _environment(
    options_cache: CachePolicy, arch: str, tools: env.CudaTools, probe: env.GpuProbe | None
) -> Environment:
    extra = {**tools.facts(), "target_arch": arch}
    if probe is None:
        platform_name, kind, count, backend = "none", f"no GPU used: compiled for {arch}", 0, None
    else:
        facts = env.gpu_facts(0)
        extra.update(facts)
        platform_name, kind, count = "gpu", probe.name or "unknown NVIDIA GPU", probe.count
        backend = f"CUDA runtime {facts.get('cuda_runtime')}, driver {facts.get('driver')}"
    return Environment(
        platform=platform_name,
        device_kind=kind,
        device_count=count,
        jax_version=jax.__version__,
        jaxlib_version=jaxlib_version(),
        backend_platform_version=backend,
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        precision="float32 accumulation in every kernel",
        cache=options_cache,
        host_cpu=host_cpu(),
        python=sys.version.split()[0],
        hostname=socket.gethostname(),
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        extra=extra,
    )


def _comparison(
    measurements: list[Measurement], flops: float, moved: float
) -> list[dict[str, Any]]:
    """Each subject's median per boundary with its rates, and how it compares with our
    kernel under the same boundary (never across boundaries)."""
    kernel = {m.boundary: m.stats.median for m in measurements if m.subject == "kernel" and m.stats}
    rows = []
    for m in measurements:
        if m.stats is None or m.stats.median <= 0:
            continue
        median = m.stats.median
        ours = kernel.get(m.boundary)
        rows.append(
            {
                "subject": m.subject,
                "boundary": m.boundary.value,
                "median_s": median,
                "rounds": m.stats.rounds,
                "flops_per_s": flops / median if flops > 0 else None,
                "bytes_per_s": moved / median if moved > 0 else None,
                "speedup_over_kernel": ours / median if ours else None,
            }
        )
    return rows


def _plan_facts(plan: KernelPlan) -> dict[str, Any]:
    return {
        "kernel": plan.kernel,
        "description": plan.description,
        "source": f"kernels/{plan.source}",
        "launches": [
            {"kernel": launch.kernel, "grid": list(launch.grid), "block": list(launch.block)}
            for launch in plan.launches
        ],
    }


def run_cuda_job(
    job: JobSpec,
    params: WorkloadParams,
    progress: Callable[[ProgressEvent], None] | None = None,
    *,
    cache_dir: Path | None = None,
    perturb: float | None = None,
    target: Target | None = None,
) -> RunResult:
    """Run a validated `cuda` job here; see the module docstring for the stages.

    A `target` picks the architecture (b200 → sm_100, h100 and h200 → sm_90); executing
    it needs a GPU of that model."""
    started = time.perf_counter()

    def emit(phase: ProgressPhase, **fields: Any) -> None:
        if progress is not None:
            progress(ProgressEvent(phase=phase, **fields))

    try:
        plan = plan_for(params)
    except NoKernel as exc:
        raise CatalogError(f"path: {exc}", "path") from None
    options = job.measure
    executes = StageId.EXECUTE in job.stages
    tools = env.detect_tools()
    probe: env.GpuProbe | None = None
    if executes:
        if options.mode not in (Mode.LATENCY, Mode.THROUGHPUT):
            raise CatalogError(
                f"measure.mode: the cuda path samples latency or throughput, not "
                f"{options.mode.value}",
                "measure.mode",
            )
        probe = env.probe_gpu()
        if probe.count == 0:
            raise _unavailable(_no_gpu_message(probe, tools))
        markers = target.chip.kind_markers if target is not None else ()
        if target is not None and not any(m in (probe.name or "") for m in markers):
            raise _unavailable(
                f"stages: execute on target {target.id} needs {target.hardware_phrase()}; "
                f"this machine's GPU is {probe.name}. Ask for --stages compile to compile "
                "for it without the hardware"
            )
    if not tools.can_compile:
        raise _unavailable(f"path cuda: no CUDA compiler on this machine ({tools.describe()})")
    try:
        arch = env.target_arch(target.chip.cuda_arch if target is not None else None)
    except ValueError as exc:
        raise _unavailable(f"path cuda: {env.ARCH_ENV}: {exc}") from None

    # --- compile: PTX, cubin, SASS, resources ------------------------------------------
    try:
        built = build(
            plan.source,
            arch,
            cache_dir=cache_root(cache_dir),
            use_cache=options.cache is not CachePolicy.COLD,
            tools=tools,
        )
    except BuildFailed as exc:
        raise RuntimeError(f"path cuda: {exc}") from None
    emit("compiled", message=f"{plan.kernel} for {arch} ({built.compiler})")
    sass = disassemble(built.cubin, plan.kernel, tools)
    artifacts = Artifacts(ptx=ptx_for(built.ptx, plan.kernel), sass=sass.text)
    kernel_resources = resources(built.ptxas_log, built.cubin, arch, plan.kernels(), tools)
    stage_seconds = StageSeconds(compile=built.ptx_s + built.cubin_s)
    warnings = [sass.note] if sass.note else []
    workload = get_workload(job.workload)
    specs = workload.input_specs(params)
    flops, moved = workload.flop_count(params), workload.byte_count(params)
    extra: dict[str, Any] = {
        "cuda": {
            **_plan_facts(plan),
            "build": built.facts(),
            "sass_tool": sass.tool,
            "compile_only": not executes,
        }
    }
    measurements: list[Measurement] = []
    correctness = None
    rates = Rates(flops=flops, bytes=moved)

    # --- execute: CuPy on the GPU --------------------------------------------------------
    if executes and probe is not None:
        from workers.cuda.launch import execute
        from workers.engine import SEED

        host_inputs = workload.make_inputs(params, np.random.default_rng(SEED))
        emit("warm-up")
        executed = execute(
            plan,
            cubin=str(built.cubin),
            workload=workload,
            params=params,
            host_inputs=host_inputs,
            options=options,
            l2_bytes=probe.l2_bytes,
            progress=progress,
            perturb=perturb,
        )
        warnings += executed.warnings
        kernel = executed.subjects[0]
        correctness = kernel.correctness
        stage_seconds.warm_up = kernel.warm_up_s
        emit("checked", message="passed" if correctness and correctness.passed else "failed")
        for subject in executed.subjects:
            ok = subject.correctness is not None and subject.correctness.passed
            if not ok:
                detail = subject.correctness.detail if subject.correctness else "not checked"
                warnings.append(f"{subject.name}: correctness failed ({detail}): no speed shown.")
                subject.measurements = [
                    m.model_copy(update={"stats": None, "note": WITHHELD})
                    for m in subject.measurements
                ]
            measurements += subject.measurements
        extra["baselines"] = {
            s.name: s.correctness.model_dump() if s.correctness else None
            for s in executed.subjects[1:]
        }
        extra["unreported_s"] = {"untimed_work": executed.untimed_s}
        if correctness is not None and correctness.passed:
            main = next(
                (
                    m
                    for m in measurements
                    if m.subject == "kernel" and m.boundary is BoundaryId.DEVICE_EVENTS
                ),
                None,
            )
            if main is not None and main.stats is not None and main.stats.median > 0:
                rates.boundary = BoundaryId.DEVICE_EVENTS
                rates.flops_per_s = flops / main.stats.median if flops > 0 else None
                rates.bytes_per_s = moved / main.stats.median if moved > 0 else None
            extra["comparison"] = _comparison(measurements, flops, moved)
        else:
            measurements = [
                m.model_copy(update={"stats": None, "note": WITHHELD}) for m in measurements
            ]
    else:
        if target is not None:
            warnings.append(DEVICELESS_NOTE.format(id=target.id, name=target.chip.name))
        warnings.append(COMPILE_ONLY_NOTE)

    result = RunResult(
        job=job,
        params=params.model_dump(mode="json"),
        inputs=[InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in specs],
        stage_seconds=stage_seconds,
        artifacts=artifacts,
        measurements=measurements,
        correctness=correctness,
        rates=rates,
        environment=_environment(options.cache, arch, tools, probe),
        warnings=warnings,
        valid=correctness is None or correctness.passed,
        kernel_resources=kernel_resources,
        extra=extra,
    )
    if target is not None:
        name, _, version = built.compiler.partition(" ")
        result.target = TargetReport(
            id=target.id,
            model=target.model.value,
            count=target.count,
            compiler=name,
            compiler_version=version or None,
            deviceless=not executes,
            arch=arch,
            compile_timing="compile: PTX and cubin builds, each timed alone"
            + (" (read from the build cache)" if built.cached else ""),
        )
    reported = (stage_seconds.compile or 0.0) + (stage_seconds.warm_up or 0.0)
    reported += sum(sum(m.samples_s) * m.calls_per_sample for m in measurements)
    result.harness_seconds = max(0.0, time.perf_counter() - started - reported)
    emit("done")
    return result
