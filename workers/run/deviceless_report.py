"""What a compile without the hardware says about itself: the warnings and notes it
carries, memory per device from `memory_analysis()` beside what the device may hold
(`usable_bytes`: libtpu's own figure on a TPU, JAX's default share on a GPU) and the
chip's published HBM, how its compile was timed, and the target report
(`workers.run.deviceless` builds the run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax

from workers.compiler.analysis import memory_stat, memory_stats
from workers.compiler.environment import detect_environment, devices_by_platform
from workers.compiler.memory_dump import Plan
from workers.protocol import (
    GPU_USABLE_SOURCE,
    CachePolicy,
    Dumps,
    Environment,
    JobSpec,
    MemoryAnalysis,
    Platform,
    Target,
    TargetMemory,
    TargetReport,
    gpu_usable_bytes,
)
from workers.protocol.hlo_summary import autotuned_gemms
from workers.run.target_program import Dumped
from workers.xla_targets.capacity import capacity_report
from workers.xla_targets.misfit import Misfit
from workers.xla_targets.topology import compiler_of

DEVICELESS_WARNING = (
    "Compiled without the hardware: XLA built this program for {id} ({count} × {name}) on a "
    "machine that has no such device. The IR, fusions, library calls, collectives and "
    "memory per device are the real compiler's output; nothing was executed, so this run "
    "has no time, no speed and no correctness check."
)
AUTOTUNE_WARNING = (
    "XLA chose the configuration of its {gemms} without measuring it: GEMM autotuning times "
    "candidate kernels on the GPU, and this compile had none, so the GEMM backend (Triton or "
    "cuBLAS) and tile sizes may differ on a real {name}."
)
COLD_WARNING = (
    "measure.cache={asked} was not applied: a compile without the hardware is always cold "
    "(JAX's caches cleared, the persistent cache off), since a cache hit would skip the "
    "compiler and leave no IR dump."
)
TPU_ESTIMATES_NOTE = (
    "cost_analysis() flops and bytes are per device. Its optimal_seconds, and the "
    "estimated_cycles in the HLO's backend configs, are the compiler's cost model, not a "
    "time: they are not reported as one."
)
GPU_COUNTS_NOTE = (
    "cost_analysis() gives nothing for a GPU compile without the device: the FLOP and "
    "byte counts are the catalog's analytic ones."
)
XLA_COUNTS_NOTE = (
    "cost_analysis() gives nothing for a GPU compile without the device, and an uploaded "
    "function has no analytic FLOP count: no FLOPs are reported; bytes are its arguments "
    "and results."
)
MISFIT_NOTE = (
    "memory: the compiler refused the program, so memory_analysis() has nothing to read; "
    "the temporaries are the figure in its refusal (it writes G for 2^30 bytes), a lower "
    "bound of what one device needs"
)
GPU_CODE_NOTE = (
    "generated code: not reported, since XLA:GPU's compile without the device leaves "
    "memory_analysis()'s generated_code_size_in_bytes at 0"
)
COMPILE_TIMING = (
    "compile: lowered.compile() timed alone, with xla_dump_to for the memory report (writing "
    "XLA's buffer assignment adds a few percent to it: bench/memory_report.py); {extra}"
)


def memory_of(compiled: Any, target: Target) -> tuple[MemoryAnalysis | None, TargetMemory, str]:
    """The per-device program's memory, that memory beside the chip's HBM, and a note on
    where the peak came from."""
    stats = memory_stats(compiled)
    argument = memory_stat(stats, "argument_size_in_bytes")
    output = memory_stat(stats, "output_size_in_bytes")
    temp = memory_stat(stats, "temp_size_in_bytes")
    peak = memory_stat(stats, "peak_memory_in_bytes")
    note = "peak: memory_analysis()'s own peak"
    if peak is None and None not in (argument, output, temp):
        alias = memory_stat(stats, "alias_size_in_bytes") or 0
        peak = (argument or 0) + (output or 0) + (temp or 0) - alias
        note = (
            "peak: arguments + outputs + temporaries − aliased bytes, from memory_analysis(), "
            "which gives no peak of its own for this target"
        )
    code = memory_stat(stats, "generated_code_size_in_bytes")
    if target.platform is Platform.GPU:
        # XLA:GPU's executable compiled without the device never fills this field in: its
        # 0 is no size (a program with a 1 MB constant reports 0 too; libtpu counts it).
        code = None
        note += f"; {GPU_CODE_NOTE}"
    memory = TargetMemory(
        peak_bytes=peak,
        argument_bytes=argument,
        output_bytes=output,
        temp_bytes=temp,
        generated_code_bytes=code,
        **capacity_of(target, None if peak is None else peak + (code or 0)),
    )
    analysis = None
    if stats is not None:
        analysis = MemoryAnalysis(
            argument_bytes=argument,
            output_bytes=output,
            temp_bytes=temp,
            peak_bytes=peak,
            alias_bytes=memory_stat(stats, "alias_size_in_bytes"),
        )
    return analysis, memory, note


def capacity_of(target: Target, needed: int | None) -> dict[str, Any]:
    """A TargetMemory's capacity fields: what one device may hold (libtpu's reading on a
    TPU, JAX's default share on a GPU), the published HBM beside it, and the share of
    the first (of the second where the first is not reported) that `needed` takes."""
    chip = target.chip
    if target.platform is Platform.TPU:
        usable: dict[str, Any] = capacity_report(target)
    else:
        usable = {"usable_bytes": gpu_usable_bytes(chip), "usable_source": GPU_USABLE_SOURCE}
    of = usable.get("usable_bytes") or chip.device_hbm_bytes
    return {
        **usable,
        "hbm_bytes": chip.device_hbm_bytes,
        "hbm_label": chip.device_hbm_label,
        "source": chip.source,
        "fraction": needed / of if needed is not None else None,
    }


def misfit_memory(misfit: Misfit, target: Target) -> TargetMemory:
    """What a refused program's device needs, as far as the refusal says: its temporaries."""
    temp = misfit.temp_bytes
    return TargetMemory(peak_bytes=temp, temp_bytes=temp, **capacity_of(target, temp))


@dataclass
class Compiled:
    """The timed compile's outcome: the executable, or the compiler's refusal for memory;
    and the memory plan its dump gave."""

    compiled: Any | None
    misfit: Misfit | None
    seconds: float
    plan: Plan | None = None
    memory: tuple[MemoryAnalysis | None, TargetMemory, str] | None = None
    """`memory_of(compiled, target)`, read once from the executable."""


def timing_note(target: Target, outcome: Compiled, dumps: Dumps) -> str:
    """How the compile was timed, and where the dumps below the HLO come from."""
    if outcome.compiled is None:
        return COMPILE_TIMING.format(extra="it ended in the compiler's refusal")
    what = "the PTX and SASS" if target.platform is Platform.GPU else "the bundles"
    if dumps is Dumps.NONE:
        extra = f"{what} were not asked for (a fit search's probe compiles once)"
    elif dumps is Dumps.LATER:
        extra = f"{what} come from a follow-up job's own compile, not counted"
    elif target.platform is Platform.GPU:
        extra = "the PTX comes from a second compile that writes a dump, not counted"
    else:
        extra = "the bundles come from one more compile, in a child process, not counted"
    return COMPILE_TIMING.format(extra=extra)


def counts_note(target: Target, workload: Any) -> str:
    """Whose FLOP and byte counts the run carries, for the target's compiler."""
    if target.platform is not Platform.GPU:
        return TPU_ESTIMATES_NOTE
    return XLA_COUNTS_NOTE if getattr(workload, "counts_from_xla", False) else GPU_COUNTS_NOTE


def deviceless_warnings(
    job: JobSpec, target: Target, outcome: Compiled, scaled: bool, summary: Any
) -> list[str]:
    """What the page says first: nothing ran; a refusal; GEMMs chosen without measuring;
    a cache policy that could not apply."""
    warnings = [DEVICELESS_WARNING.format(id=target.id, count=target.count, name=target.chip.name)]
    if outcome.misfit is not None:
        remedy = "a larger slice, or smaller shapes" if scaled else "smaller shapes"
        warnings.append(
            f"Does not fit: {target.compiler_phrase()} refused to compile for {target.id}: "
            f"{outcome.misfit.message} The run shows the compiler's own figures and has no "
            f"optimized HLO; {remedy} would fit."
        )
    gpu = target.platform is Platform.GPU and outcome.compiled is not None
    gemms = autotuned_gemms(summary) if gpu and summary is not None else []
    if gemms:  # none in a Pallas kernel: its author chose its tiles, not the autotuner
        named = ", ".join(gemms[:3]) + (f" and {len(gemms) - 3} more" if len(gemms) > 3 else "")
        gemm = f"GEMM {named}" if len(gemms) == 1 else f"GEMMs {named}"
        warnings.append(AUTOTUNE_WARNING.format(gemms=gemm, name=target.chip.name))
    if job.measure.cache is not CachePolicy.COLD:
        warnings.append(COLD_WARNING.format(asked=job.measure.cache.value))
    return warnings


def target_report(
    target: Target,
    outcome: Compiled,
    *,
    notes: list[str],
    dumped: Dumped,
    mesh: str | None,
    timing: str,
) -> TargetReport:
    """What the compiler compiled for, what it said, and that nothing ran there."""
    name, version = compiler_of(target)
    kernels = dumped.kernels
    return TargetReport(
        id=target.id,
        model=target.model.value,
        count=target.count,
        compiler=name,
        compiler_version=version,
        deviceless=True,
        arch=target.chip.cuda_arch,
        memory=(
            outcome.memory[1]
            if outcome.memory is not None
            else misfit_memory(outcome.misfit, target)
            if outcome.misfit is not None
            else None
        ),
        notes=notes + kernels.notes,
        kernels=kernels.schedules,
        dump=kernels.dump,
        refused=outcome.misfit.message if outcome.misfit is not None else None,
        mesh=mesh,
        compile_timing=timing,
    )


def host_environment(target: Target) -> Environment:
    """The machine that compiled, named with what it compiled for."""
    host = devices_by_platform().get("cpu") or jax.devices()
    environment = detect_environment(host[0], CachePolicy.COLD, None, list(host))
    name, version = compiler_of(target)
    environment.extra["compiled_for"] = f"{target.id} ({name} {version or ''})".strip()
    return environment
