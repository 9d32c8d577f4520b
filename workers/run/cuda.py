"""A `cuda` job through its stages, as one run: the CUDA path's side of `run_job`.
The toolchain it drives (kernel plans, builds, SASS, launches) is `workers.cuda`.

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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jax
import numpy as np

from workers.catalog import CatalogError
from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import public_params
from workers.compiler.environment import describe_devices, host_cpu, jaxlib_version
from workers.cuda import env
from workers.cuda.build import BuildFailed, build, cache_root
from workers.cuda.plan import KernelPlan, NoKernel, plan_for
from workers.cuda.sass import disassemble, ptx_for, resources
from workers.measure.publish import Measured, RateBasis, Work
from workers.protocol import (
    Artifacts,
    BoundaryId,
    CachePolicy,
    Correctness,
    Environment,
    InputInfo,
    JobSpec,
    Mode,
    RunResult,
    StageId,
    StageSeconds,
    Target,
    TargetReport,
)
from workers.protocol.speeds import KERNEL_SUBJECT
from workers.run.base import SEED, PathUnavailable, Progress, emitter
from workers.workloads import get_workload

DEVICELESS_NOTE = (
    "Compiled without the hardware: the kernel was built for {id} ({name}) on a machine "
    "without such a GPU. PTX, SASS and the resource report are the CUDA compiler's real "
    "output; nothing ran, so there is no time and no correctness check."
)
COMPILE_ONLY_NOTE = (
    "compile only: PTX, SASS and the resource report were produced without a GPU; "
    "executing this kernel needs an NVIDIA GPU (a worker with cuda_run)."
)


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


def _target_report(
    target: Target, arch: str, compiler: str, executes: bool, cached: bool
) -> TargetReport:
    name, _, version = compiler.partition(" ")
    return TargetReport(
        id=target.id,
        model=target.model.value,
        count=target.count,
        compiler=name,
        compiler_version=version or None,
        deviceless=not executes,
        arch=arch,
        compile_timing="compile: the PTX and cubin builds, each timed alone"
        + (" (read from the build cache: nothing was compiled)" if cached else ""),
    )


def run_cuda_job(
    job: JobSpec,
    params: WorkloadParams,
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
    target: Target | None = None,
) -> RunResult:
    """Run a validated `cuda` job here; see the module docstring for the stages.

    A `target` picks the architecture (b200 → sm_100, h100 and h200 → sm_90); executing
    it needs a GPU of that model."""
    started = time.perf_counter()
    emit = emitter(progress)
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
            raise PathUnavailable(_no_gpu_message(probe, tools))
        markers = target.chip.kind_markers if target is not None else ()
        if target is not None and not any(m in (probe.name or "") for m in markers):
            raise PathUnavailable(
                f"stages: execute on target {target.id} needs {target.hardware_phrase()}; "
                f"this machine's GPU is {probe.name}. Ask for --stages compile to compile "
                "for it without the hardware"
            )
    if not tools.can_compile:
        raise PathUnavailable(f"path cuda: no CUDA compiler on this machine ({tools.describe()})")
    try:
        arch = env.target_arch(target.chip.cuda_arch if target is not None else None)
    except ValueError as exc:
        raise PathUnavailable(f"path cuda: {env.ARCH_ENV}: {exc}") from None

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
    measured = Measured(
        job=job,
        params=public_params(params, job.path.value),
        environment=_environment(options.cache, arch, tools, probe),
        started=started,
        inputs=[InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in specs],
        stage_seconds=stage_seconds,
        artifacts=artifacts,
        work=Work(workload.flop_count(params), workload.byte_count(params)),
        rate_basis=RateBasis(BoundaryId.DEVICE_EVENTS, KERNEL_SUBJECT),
        comparison=True,
        warnings=warnings,
        kernel_resources=kernel_resources,
        extra={
            "cuda": {
                **_plan_facts(plan),
                "build": built.facts(),
                "sass_tool": sass.tool,
                "compile_only": not executes,
            }
        },
    )
    if target is not None:
        measured.target = _target_report(target, arch, built.compiler, executes, built.cached)
    if not executes or probe is None:
        if target is not None:
            measured.warnings.append(DEVICELESS_NOTE.format(id=target.id, name=target.chip.name))
        measured.warnings.append(COMPILE_ONLY_NOTE)
        result = measured.check(None).publish()
        emit("done")
        return result

    # --- execute: CuPy on the GPU --------------------------------------------------------
    from workers.cuda.launch import execute

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
    )
    measured.warnings += executed.warnings
    kernel, *baselines = executed.subjects
    measured.stage_seconds.warm_up = kernel.warm_up_s
    emit(
        "checked",
        message="passed" if kernel.correctness and kernel.correctness.passed else "failed",
    )
    for subject in executed.subjects:
        measured.measurements += subject.measurements
    measured.extra["baselines"] = {
        s.name: s.correctness.model_dump() if s.correctness else None for s in baselines
    }
    measured.unreported = {"untimed_work": executed.untimed_s}
    result = measured.check(
        kernel.correctness or _unchecked(),
        {s.name: s.correctness or _unchecked() for s in baselines},
    ).publish()
    emit("done")
    return result


def _unchecked() -> Correctness:
    """The verdict of a subject whose output was never compared: a failure."""
    return Correctness(passed=False, error=None, tolerance=0.0, detail="not checked")
