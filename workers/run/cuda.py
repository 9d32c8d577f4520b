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
from dataclasses import dataclass, field
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
from workers.cuda.build import BuildFailed, Built, build, cache_root
from workers.cuda.plan import KernelPlan, NoKernel, plan_for
from workers.cuda.sass import Disassembly, disassemble, ptx_for, resources
from workers.measure.publish import Measured, RateBasis, Work
from workers.protocol import (
    Artifacts,
    BoundaryId,
    CachePolicy,
    Correctness,
    Environment,
    InputInfo,
    JobSpec,
    KernelResources,
    Measurement,
    MeasureOptions,
    Mode,
    RunResult,
    StageId,
    StageSeconds,
    Target,
    TargetReport,
)
from workers.protocol.speeds import KERNEL_SUBJECT
from workers.run.base import SEED, Emit, PathUnavailable, Progress, emitter
from workers.workloads import Workload, get_workload

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
    if probe is None:
        platform_name, kind, count, backend = "none", f"no GPU used: compiled for {arch}", 0, None
        facts: dict[str, Any] = {}
    else:
        facts = env.gpu_facts(0)
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
        extra={**tools.facts(), "target_arch": arch, **facts},
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


def _plan(params: WorkloadParams) -> KernelPlan:
    """The kernel plan for these parameters; a CatalogError on `path` when none fits."""
    try:
        return plan_for(params)
    except NoKernel as exc:
        raise CatalogError(f"path: {exc}", "path") from None


def _gpu(job: JobSpec, tools: env.CudaTools, target: Target | None) -> env.GpuProbe:
    """The GPU a job that executes will run on, refused at once when its mode is not one
    the path samples, when there is no GPU, or when it is not the target's model."""
    mode = job.measure.mode
    if mode not in (Mode.LATENCY, Mode.THROUGHPUT):
        raise CatalogError(
            f"measure.mode: the cuda path samples latency or throughput, not {mode.value}",
            "measure.mode",
        )
    probe = env.probe_gpu()
    if probe.count == 0:
        raise PathUnavailable(_no_gpu_message(probe, tools))
    if target is not None and not target.chip.matches(probe.name or ""):
        raise PathUnavailable(
            f"stages: execute on target {target.id} needs {target.hardware_phrase()}; "
            f"this machine's GPU is {probe.name}. Ask for --stages compile to compile "
            "for it without the hardware"
        )
    return probe


def _arch(tools: env.CudaTools, target: Target | None) -> str:
    """The architecture to build for (the target's, else the configured one), refused
    when this machine has no CUDA compiler."""
    if not tools.can_compile:
        raise PathUnavailable(f"path cuda: no CUDA compiler on this machine ({tools.describe()})")
    try:
        return env.target_arch(target.chip.cuda_arch if target is not None else None)
    except ValueError as exc:
        raise PathUnavailable(f"path cuda: {env.ARCH_ENV}: {exc}") from None


@dataclass(frozen=True)
class _Compiled:
    """A kernel built for one architecture (PTX, cubin), its SASS disassembled and its
    resources read: ready to report, and to execute where there is a GPU."""

    plan: KernelPlan
    arch: str
    built: Built
    sass: Disassembly
    kernel_resources: list[KernelResources]

    def facts(self, executes: bool) -> dict[str, Any]:
        """What the run records of the kernel, its build and its disassembly."""
        return {
            **_plan_facts(self.plan),
            "build": self.built.facts(),
            "sass_tool": self.sass.tool,
            "compile_only": not executes,
        }


def _compile(
    plan: KernelPlan,
    arch: str,
    tools: env.CudaTools,
    *,
    cache: CachePolicy,
    cache_dir: Path | None,
    emit: Emit,
) -> _Compiled:
    """The compile stage: the plan's source built for `arch` (from the build cache unless
    the job is cold), then its SASS and resource report."""
    try:
        built = build(
            plan.source,
            arch,
            cache_dir=cache_root(cache_dir),
            use_cache=cache is not CachePolicy.COLD,
            tools=tools,
        )
    except BuildFailed as exc:
        raise RuntimeError(f"path cuda: {exc}") from None
    emit("compiled", message=f"{plan.kernel} for {arch} ({built.compiler})")
    sass = disassemble(built.cubin, plan.kernel, tools)
    kernel_resources = resources(built.ptxas_log, built.cubin, arch, plan.kernels(), tools)
    return _Compiled(plan, arch, built, sass, kernel_resources)


@dataclass(frozen=True)
class _Ran:
    """What executing the kernel and its baselines added to a run (only notes, when the
    job stopped at compile): ready to be measured and checked."""

    warnings: list[str]
    measurements: list[Measurement] = field(default_factory=list)
    warm_up_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    unreported: dict[str, float] | None = None
    correctness: Correctness | None = None
    """The kernel's verdict; None when nothing executed, so nothing was judged."""
    subjects: dict[str, Correctness] = field(default_factory=dict)

    @property
    def executed(self) -> bool:
        """Whether the kernel ran: only then is there a verdict."""
        return self.correctness is not None


def _not_run(target: Target | None) -> _Ran:
    """A job that stopped at compile: the notes saying so, and that a target's kernel was
    built without its hardware."""
    deviceless = (
        [DEVICELESS_NOTE.format(id=target.id, name=target.chip.name)] if target is not None else []
    )
    return _Ran(warnings=[*deviceless, COMPILE_ONLY_NOTE])


def _execute(
    compiled: _Compiled,
    workload: Workload[Any],
    params: WorkloadParams,
    *,
    options: MeasureOptions,
    probe: env.GpuProbe,
    progress: Progress | None,
    emit: Emit,
) -> _Ran:
    """The execute stage: the kernel and its baselines on the GPU (CuPy), timed and
    checked; see `workers.cuda.launch`."""
    from workers.cuda.launch import execute

    host_inputs = workload.make_inputs(params, np.random.default_rng(SEED))
    emit("warm-up")
    executed = execute(
        compiled.plan,
        cubin=str(compiled.built.cubin),
        workload=workload,
        params=params,
        host_inputs=host_inputs,
        options=options,
        l2_bytes=probe.l2_bytes,
        progress=progress,
    )
    kernel, *baselines = executed.subjects
    emit(
        "checked",
        message="passed" if kernel.correctness and kernel.correctness.passed else "failed",
    )
    return _Ran(
        warnings=executed.warnings,
        measurements=[m for subject in executed.subjects for m in subject.measurements],
        warm_up_s=kernel.warm_up_s,
        extra={
            "baselines": {
                s.name: s.correctness.model_dump() if s.correctness else None for s in baselines
            }
        },
        unreported={"untimed_work": executed.untimed_s},
        correctness=kernel.correctness or _unchecked(),
        subjects={s.name: s.correctness or _unchecked() for s in baselines},
    )


def _measured(
    job: JobSpec,
    params: WorkloadParams,
    compiled: _Compiled,
    ran: _Ran,
    *,
    workload: Workload[Any],
    environment: Environment,
    started: float,
    target: Target | None,
) -> Measured:
    """The run as measured, from what compiling and executing (or not) produced."""
    built, executes = compiled.built, ran.executed
    return Measured(
        job=job,
        params=public_params(params, job.path.value),
        environment=environment,
        started=started,
        inputs=[
            InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype)
            for s in workload.input_specs(params)
        ],
        stage_seconds=StageSeconds(compile=built.ptx_s + built.cubin_s, warm_up=ran.warm_up_s),
        artifacts=Artifacts(ptx=ptx_for(built.ptx, compiled.plan.kernel), sass=compiled.sass.text),
        measurements=ran.measurements,
        work=Work(workload.flop_count(params), workload.byte_count(params)),
        rate_basis=RateBasis(BoundaryId.DEVICE_EVENTS, KERNEL_SUBJECT),
        comparison=True,
        warnings=[*([compiled.sass.note] if compiled.sass.note else []), *ran.warnings],
        kernel_resources=compiled.kernel_resources,
        extra={"cuda": compiled.facts(executes), **ran.extra},
        unreported=ran.unreported,
        target=(
            _target_report(target, compiled.arch, built.compiler, executes, built.cached)
            if target is not None
            else None
        ),
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
    plan = _plan(params)
    tools = env.detect_tools()
    probe = _gpu(job, tools, target) if StageId.EXECUTE in job.stages else None
    arch = _arch(tools, target)
    cache = job.measure.cache
    compiled = _compile(plan, arch, tools, cache=cache, cache_dir=cache_dir, emit=emit)
    environment = _environment(cache, arch, tools, probe)
    workload = get_workload(job.workload)
    ran = (
        _not_run(target)
        if probe is None
        else _execute(
            compiled,
            workload,
            params,
            options=job.measure,
            probe=probe,
            progress=progress,
            emit=emit,
        )
    )
    measured = _measured(
        job,
        params,
        compiled,
        ran,
        workload=workload,
        environment=environment,
        started=started,
        target=target,
    )
    result = measured.check(ran.correctness, ran.subjects).publish()
    emit("done")
    return result


def _unchecked() -> Correctness:
    """The verdict of a subject whose output was never compared: a failure."""
    return Correctness(passed=False, error=None, tolerance=0.0, detail="not checked")
