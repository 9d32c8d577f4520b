"""A job compiled for its target without the hardware: trace → lower → compile, no execute.

The engine sends a job here when its target's devices are not attached to this process.
The run carries what the real compiler produced (optimized HLO, StableHLO, the HLO
summary, a scale workload's placement on the target's mesh, memory per device beside the
chip's published HBM; below the HLO, `workers.run.kernel_dumps`: TPU bundles, GPU PTX and
SASS, each Pallas kernel's own IR) and says plainly that nothing ran: no time, no speed,
no correctness check.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jax

from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import KernelChoice, kernel_record, public_params
from workers.catalog.target_rules import COMPILE_ONLY_CAP
from workers.compiler.compile_cache import apply_cache_policy, default_cache_dir
from workers.compiler.environment import describe_devices, detect_environment, devices_by_platform
from workers.compiler.options import compile_options
from workers.compiler.pipeline import capture_pipeline, max_bytes_from_env
from workers.compiler.source import workload_source
from workers.compiler.source_tags import tag_sources
from workers.measure.publish import Measured
from workers.pallas.lowering import claim_architecture, lowering_for
from workers.protocol import (
    Artifacts,
    CachePolicy,
    InputInfo,
    JobSpec,
    MemoryAnalysis,
    PipelineCapture,
    Platform,
    RunResult,
    StageId,
    StageSeconds,
    Target,
    TargetMemory,
    TargetReport,
)
from workers.protocol.compiler_options import as_text
from workers.protocol.hlo_summary import autotuned_gemms, compiled_costs, summarize_hlo
from workers.run.base import PathUnavailable, Progress, emitter
from workers.run.kernel_dumps import KernelArtifacts, Lowered, dump_artifacts
from workers.run.program import memory_stat, memory_stats, work_of
from workers.run.stages import bind_workload, placed_inputs, trace_and_lower
from workers.scale.placement import placement_report
from workers.scale.prepare import prepare as prepare_scale
from workers.workloads.base import function_for
from workers.xla_targets.dump_child import mesh_of, placement_of
from workers.xla_targets.misfit import Misfit, hbm_misfit
from workers.xla_targets.topology import compiler_of, target_devices

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
COMPILE_TIMING = "compile: lowered.compile() with no dump option, timed alone; {extra}"


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
    chip = target.chip
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
        hbm_bytes=chip.hbm_bytes,
        hbm_label=chip.hbm_label,
        source=chip.source,
        fraction=peak / chip.hbm_bytes if peak is not None else None,
    )
    analysis = None
    if stats is not None:
        analysis = MemoryAnalysis(
            argument_bytes=argument, output_bytes=output, temp_bytes=temp, peak_bytes=peak
        )
    return analysis, memory, note


def misfit_memory(misfit: Misfit, target: Target) -> TargetMemory:
    """What a refused program's device needs, as far as the refusal says: its temporaries."""
    chip = target.chip
    temp = misfit.temp_bytes
    return TargetMemory(
        peak_bytes=temp,
        temp_bytes=temp,
        hbm_bytes=chip.hbm_bytes,
        hbm_label=chip.hbm_label,
        source=chip.source,
        fraction=temp / chip.hbm_bytes if temp is not None else None,
    )


def refuse_execution(job: JobSpec, target: Target) -> str | None:
    """Why `job` cannot run here when `target` is compiled without the hardware; None if
    it only compiles."""
    running = [s.value for s in job.stages if s in (StageId.EXECUTE, StageId.SCALE)]
    if not running:
        return None
    return (
        f"stages: {' and '.join(running)} {'needs' if len(running) == 1 else 'need'} the "
        f"hardware; {target.id} would be compiled "
        f"here without it (this process has {describe_devices()}). Running it needs "
        f"{target.hardware_phrase()}: submit it to a server with such a worker, or ask for "
        "--stages compile"
    )


def real_devices(target: Target) -> list[Any] | None:
    """The target's devices when this process has them for real (model and count), else None."""
    found = devices_by_platform().get(target.platform.value, [])
    matching = [
        d
        for d in found
        if any(m.lower() in str(d.device_kind).lower() for m in target.chip.kind_markers)
    ]
    return matching[: target.count] if len(matching) >= target.count else None


def hardware_report(target: Target, device: Any) -> TargetReport:
    """The target report of a run on real devices of the target's model."""
    return TargetReport(
        id=target.id,
        model=target.model.value,
        count=target.count,
        compiler=f"XLA:{target.platform.value.upper()} ({device.client.platform})",
        compiler_version=getattr(device.client, "platform_version", None),
        deviceless=False,
        arch=target.chip.cuda_arch,
    )


def refuse_resources(exc: Exception, target: Target) -> None:
    """Raise PathUnavailable, in the compiler's own figures, when it refused the program
    for what it needs (HBM, a Pallas kernel's VMEM); return to re-raise anything else."""
    text = str(exc)
    if "RESOURCE_EXHAUSTED" not in text:
        return
    message = text.split("RESOURCE_EXHAUSTED:", 1)[-1].strip().splitlines()[0]
    advice = (
        "memory per device is what the compiler reports; compare a larger slice, or smaller shapes"
    )
    if "Vmem" in message or "VMEM" in message:
        advice = (
            "a Pallas kernel's blocks must fit the on-chip scoped VMEM, 32 MiB on v6e: "
            "choose smaller block sizes"
        )
    raise PathUnavailable(
        f"does not fit: {target.compiler_phrase()} refused to compile for {target.id}: "
        f"{message[:300]} ({advice})"
    ) from None


def run_deviceless(
    job: JobSpec,
    params: WorkloadParams,
    target: Target,
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
    choice: KernelChoice | None = None,
    files_dir: Path | None = None,
) -> RunResult:
    """Compile `job` for `target` without its hardware and return the run (never executed);
    `choice` is the kernel the job asked for (XLA's when None)."""
    started = time.perf_counter()
    clock = time.perf_counter
    emit = emitter(progress)
    refusal = refuse_execution(job, target)
    if refusal is not None:
        raise PathUnavailable(refusal)
    # Nothing is placed anywhere: no byte cap (workers.catalog.target_rules.byte_cap).
    workload = bind_workload(job, params, files_dir, COMPILE_ONLY_CAP)
    on_target = getattr(workload, "on_target", None)
    placement = on_target(params, target) if on_target is not None else None
    devices = list(target_devices(target))
    specs = workload.input_specs(params)
    # Always cold: a persistent-cache hit would skip the compiler and give no dump.
    apply_cache_policy(CachePolicy.COLD, cache_dir or default_cache_dir())
    scaled = prepare_scale(workload, params, devices, choice)
    if scaled is None:
        jitted = jax.jit(function_for(workload, params, choice))
        abstract, _ = placed_inputs(workload, params, devices)
    else:
        jitted, abstract = scaled.jitted, scaled.abstract
    mesh = scaled.mesh if scaled is not None else None
    with lowering_for(choice, mesh, devices[0]):
        staged = trace_and_lower(jitted, abstract, emit)
    traced, lowered = staged.traced, staged.lowered
    tagged = tag_sources(workload, lowered)  # an uploaded program's ops, before the compile
    t0 = clock()
    misfit: Misfit | None = None
    try:
        compiled = lowered.compile(compiler_options=compile_options(job))
    except Exception as exc:
        # libtpu refuses a program whose temporaries pass the chip's HBM: that is the
        # answer to "does it fit?", a finished run that shows it, as on a GPU target. A
        # Pallas kernel whose blocks pass the scoped VMEM is refused in the compiler's words.
        misfit = hbm_misfit(exc)
        if misfit is None:
            refuse_resources(exc, target)
            raise
        compiled = None
    compile_s = clock() - t0
    claim_architecture(choice)
    emit("compiled", message=f"for {target.id}, without the hardware")
    hlo = tagged.hlo_of(compiled) if compiled is not None else None
    artifacts = Artifacts(
        jaxpr=traced.jaxpr.pretty_print(source_info=True),  # file:line notes: source links
        stablehlo=tagged.stablehlo or lowered.as_text(debug_info=True),
        hlo=hlo,
    )
    gpu = target.platform is Platform.GPU and compiled is not None
    counts_from_xla = getattr(workload, "counts_from_xla", False)
    notes: list[str] = []
    # Below the HLO: PTX and SASS, bundles, the kernels' own IR; none of it timed. An
    # exported program over several devices is placed by its own arguments' mesh.
    place = placement_of(target.id, mesh or mesh_of(abstract), devices[0], job.compiler_options)
    program = Lowered(jitted, abstract, lowered, place, mesh, devices[0], choice)
    kernels = KernelArtifacts()  # a program the compiler refused has no machine code
    if compiled is not None:
        kernels = dump_artifacts(
            program, target, passes=job.measure.pipeline, max_bytes=max_bytes_from_env()
        )
        emit("compiled", message="machine code dumped")
    for name in ("ptx", "sass", "mosaic", "bundles", "triton", "mosaic_gpu"):
        setattr(artifacts, name, getattr(kernels, name))
    unreported: dict[str, float] = dict(kernels.seconds)
    if tagged.tags:
        unreported["source_tags"] = tagged.seconds
    reports = kernels.reports
    if gpu:
        timing = COMPILE_TIMING.format(
            extra="the PTX comes from a second compile that writes a dump, not counted"
        )
        notes.append(XLA_COUNTS_NOTE if counts_from_xla else GPU_COUNTS_NOTE)
        cost = None
    elif compiled is not None:
        timing = COMPILE_TIMING.format(
            extra="the bundles come from one more compile, in a child process, not counted"
        )
        notes.append(TPU_ESTIMATES_NOTE)
        cost = compiled_costs(compiled)
    else:
        timing = COMPILE_TIMING.format(extra="it ended in the compiler's refusal")
        cost = None
    if compiled is not None:
        analysis, memory, memory_note = memory_of(compiled, target)
    else:
        assert misfit is not None
        analysis, memory, memory_note = None, misfit_memory(misfit, target), MISFIT_NOTE
    notes.append(memory_note)
    if job.compiler_options:
        notes.append(f"compiled with {as_text(job.compiler_options)}")
    name, version = compiler_of(target)
    report = TargetReport(
        id=target.id,
        model=target.model.value,
        count=target.count,
        compiler=name,
        compiler_version=version,
        deviceless=True,
        arch=target.chip.cuda_arch,
        memory=memory,
        compile_timing=timing,
        notes=notes + kernels.notes,
        kernels=kernels.schedules,
        dump=kernels.dump,
        refused=misfit.message if misfit is not None else None,
    )
    warnings = [DEVICELESS_WARNING.format(id=target.id, count=target.count, name=target.chip.name)]
    if misfit is not None:
        remedy = "smaller shapes" if scaled is None else "a larger slice, or smaller shapes"
        warnings.append(
            f"Does not fit: {target.compiler_phrase()} refused to compile for {target.id}: "
            f"{misfit.message} The run shows the compiler's own figures and has no optimized "
            f"HLO; {remedy} would fit."
        )
    summary = summarize_hlo(hlo) if hlo else None
    gemms = autotuned_gemms(summary) if gpu and summary is not None else []
    if gemms:  # none in a Pallas kernel: its author chose its tiles, not the autotuner
        named = ", ".join(gemms[:3]) + (f" and {len(gemms) - 3} more" if len(gemms) > 3 else "")
        gemm = f"GEMM {named}" if len(gemms) == 1 else f"GEMMs {named}"
        warnings.append(AUTOTUNE_WARNING.format(gemms=gemm, name=target.chip.name))
    if job.measure.cache is not CachePolicy.COLD:
        warnings.append(COLD_WARNING.format(asked=job.measure.cache.value))
    pipeline = PipelineCapture(files=reports) if gpu and reports else None
    if job.measure.pipeline and compiled is not None:  # its own compile, with the per-pass dump
        t0 = clock()
        pipeline = capture_pipeline(lowered, max_bytes_from_env(), job.compiler_options)
        unreported["pipeline_compile"] = clock() - t0
    host = devices_by_platform().get("cpu") or jax.devices()
    environment = detect_environment(host[0], CachePolicy.COLD, None, list(host))
    environment.extra["compiled_for"] = f"{target.id} ({name} {version or ''})".strip()
    measured = Measured(
        job=job,
        params=public_params(params, job.path.value),
        environment=environment,
        started=started,
        inputs=[InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in specs],
        stage_seconds=StageSeconds(trace=staged.trace_s, lower=staged.lower_s, compile=compile_s),
        artifacts=artifacts,
        hlo_summary=summary,
        cost_analysis=cost,
        memory_analysis=analysis,
        work=work_of(workload, params, compiled),
        warnings=warnings,
        extra={
            "compile_only": True,
            **({"kernel": kernel_record(choice)} if choice is not None and choice.pallas else {}),
        },
        unreported=unreported,
        target=report,
        source=workload_source(workload, choice is not None and choice.pallas),
        pipeline=pipeline,
        kernel_resources=kernels.resources,
        kernel_pipelines=kernels.pipelines,
    )
    if placement is not None:
        report.mesh = placement
    if scaled is not None and compiled is not None:
        t0 = clock()
        measured.placement = placement_report(scaled, compiled, hlo)
        unreported["placement_report"] = clock() - t0
        report.mesh = (
            f"{' × '.join(f'{a}={n}' for a, n in scaled.mesh.shape.items())} over "
            f"{scaled.mesh.size} {target.chip.name} devices (topology order)"
        )
    result = measured.check(None).publish()  # nothing executed: nothing to judge
    emit("done")
    return result
