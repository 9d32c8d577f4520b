"""A job compiled for its target without the hardware: trace → lower → compile, no execute.

The engine sends a job here when its target's devices are not attached to this process.
The run carries what the real compiler produced (optimized HLO, StableHLO, the HLO
summary, a scale workload's placement on the target's mesh, memory per device beside the
what libtpu makes available (or a GPU's usable share) and the chip's published HBM; below
the HLO, `workers.run.kernel_dumps`: TPU bundles, GPU PTX and
SASS, each Pallas kernel's own IR) and says plainly that nothing ran: no time, no speed,
no correctness check.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import KernelChoice, kernel_record, public_params
from workers.compiler.environment import describe_devices, devices_by_platform
from workers.compiler.memory_dump import dump_folder, dump_options, plan_again, read_plan, report_of
from workers.compiler.options import compile_options
from workers.compiler.source import workload_source
from workers.measure.publish import Measured
from workers.pallas.lowering import claim_architecture
from workers.protocol import (
    Artifacts,
    Dumps,
    InputInfo,
    JobSpec,
    Platform,
    RunResult,
    StageId,
    StageSeconds,
    Target,
    TargetReport,
)
from workers.protocol.compiler_options import as_text
from workers.protocol.hlo_summary import compiled_costs, summarize_hlo
from workers.run.base import PathUnavailable, Progress, emitter
from workers.run.deviceless_report import (
    MISFIT_NOTE,
    Compiled,
    counts_note,
    deviceless_warnings,
    host_environment,
    memory_of,
    target_report,
    timing_note,
)
from workers.run.kernel_dumps import KernelArtifacts
from workers.run.program import work_of
from workers.run.target_program import (
    Dumped,
    TargetProgram,
    decoded_only,
    dump_below_hlo,
    lower_for_target,
)
from workers.scale.placement import placement_report
from workers.xla_targets.misfit import hbm_misfit

KERNEL_ARTIFACTS = ("ptx", "sass", "mosaic", "bundles", "triton", "mosaic_gpu")
"""What the dumps below the optimized HLO fill in of a run's artifacts."""


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
    matching = [d for d in found if target.chip.matches(str(d.device_kind))]
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
            "a Pallas kernel's blocks must fit the on-chip scoped VMEM (32 MiB on v6e, "
            "16 MiB on v5e): choose smaller block sizes"
        )
    raise PathUnavailable(
        f"does not fit: {target.compiler_phrase()} refused to compile for {target.id}: "
        f"{message[:300]} ({advice})"
    ) from None


def compile_for_target(program: TargetProgram, job: JobSpec, target: Target) -> Compiled:
    """`lowered.compile()` with the job's options, timed alone, writing the buffer
    assignment the memory report reads (`workers.compiler.memory_dump`). libtpu refuses a
    program whose temporaries pass the chip's HBM: that is the answer to "does it fit?", a
    finished run that shows it, as on a GPU target. A Pallas kernel whose blocks pass the
    scoped VMEM is refused in the compiler's words (PathUnavailable)."""
    with dump_folder() as folder:
        t0 = time.perf_counter()
        try:
            options = compile_options(job, dump_options(folder))
            compiled = program.lowered.compile(compiler_options=options)
        except Exception as exc:
            misfit = hbm_misfit(exc)
            if misfit is None:
                refuse_resources(exc, target)
                raise
            return Compiled(None, misfit, time.perf_counter() - t0)
        seconds = time.perf_counter() - t0
        plan = read_plan(folder)
    if plan.dump is None:  # a cache hit writes no dump
        plan = plan_again(program.lowered, compile_options(job))
    return Compiled(compiled, None, seconds, plan, memory_of(compiled, target))


def mesh_words(program: TargetProgram, target: Target, placement: str | None) -> str | None:
    """The mesh the program was compiled over, as the target report names it."""
    scaled = program.scaled
    if scaled is None:
        return placement
    axes = " × ".join(f"{a}={n}" for a, n in scaled.mesh.shape.items())
    return f"{axes} over {scaled.mesh.size} {target.chip.name} devices (topology order)"


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
    `choice` is the kernel the job asked for (XLA's when None). Lower → compile → dump →
    report; with `dumps = later` the dumps are left to a follow-up job, with `none` to
    no one."""
    started = time.perf_counter()
    emit = emitter(progress)
    refusal = refuse_execution(job, target)
    if refusal is not None:
        raise PathUnavailable(refusal)
    program = lower_for_target(
        job, params, target, emit, cache_dir=cache_dir, choice=choice, files_dir=files_dir
    )
    on_target = getattr(program.workload, "on_target", None)
    outcome = compile_for_target(program, job, target)
    claim_architecture(choice)
    emit("compiled", message=f"for {target.id}, without the hardware")
    later = job.dumps is not Dumps.INLINE  # later, or none at all
    if outcome.compiled is None:  # a program the compiler refused has no machine code
        dumped = Dumped(KernelArtifacts(), None, {})
    elif later:
        dumped = Dumped(decoded_only(program, target), None, {})
    else:
        dumped = dump_below_hlo(program, job, target, emit)
    measured = _measured(
        job, params, target, program=program, outcome=outcome, dumped=dumped, started=started
    )
    placement = on_target(params, target) if on_target is not None else None
    measured.target = target_report(
        target,
        outcome,
        notes=_notes(job, target, program, outcome),
        dumped=dumped,
        mesh=mesh_words(program, target, placement),
        timing=timing_note(target, outcome, job.dumps),
    )
    if program.scaled is not None and outcome.compiled is not None:
        t0 = time.perf_counter()
        hlo = measured.artifacts.hlo
        measured.placement = placement_report(program.scaled, outcome.compiled, hlo)
        assert measured.unreported is not None
        measured.unreported["placement_report"] = time.perf_counter() - t0
    result = measured.check(None).publish()  # nothing executed: nothing to judge
    emit("done")
    return result


def _notes(job: JobSpec, target: Target, program: TargetProgram, outcome: Compiled) -> list[str]:
    notes = [counts_note(target, program.workload)]
    notes.append(outcome.memory[2] if outcome.memory is not None else MISFIT_NOTE)
    if job.compiler_options:
        notes.append(f"compiled with {as_text(job.compiler_options)}")
    return notes


def _measured(
    job: JobSpec,
    params: WorkloadParams,
    target: Target,
    *,
    program: TargetProgram,
    outcome: Compiled,
    dumped: Dumped,
    started: float,
) -> Measured:
    """The run as compiled: its IR, summary, counts and memory, nothing executed."""
    compiled, staged, choice = outcome.compiled, program.staged, program.choice
    hlo = program.tagged.hlo_of(compiled) if compiled is not None else None
    kernels = dumped.kernels
    artifacts = Artifacts(
        jaxpr=staged.traced.jaxpr.pretty_print(source_info=True),  # file:line: source links
        stablehlo=program.tagged.stablehlo or staged.lowered.as_text(debug_info=True),
        hlo=hlo,
        **{n: getattr(kernels, n) for n in KERNEL_ARTIFACTS},
    )
    unreported = dict(dumped.seconds)
    if program.tagged.tags:
        unreported["source_tags"] = program.tagged.seconds
    plan = outcome.plan
    if plan is not None:
        unreported["memory_report"] = plan.seconds
    summary = summarize_hlo(hlo) if hlo else None
    tpu = target.platform is not Platform.GPU and compiled is not None
    specs = program.workload.input_specs(params)
    return Measured(
        job=job,
        params=public_params(params, job.path.value),
        environment=host_environment(target),
        started=started,
        inputs=[InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in specs],
        stage_seconds=StageSeconds(
            trace=staged.trace_s, lower=staged.lower_s, compile=outcome.seconds
        ),
        artifacts=artifacts,
        hlo_summary=summary,
        cost_analysis=compiled_costs(compiled) if tpu else None,
        memory_analysis=outcome.memory[0] if outcome.memory is not None else None,
        work=work_of(program.workload, params, compiled),
        warnings=deviceless_warnings(job, target, outcome, program.scaled is not None, summary),
        extra={
            "compile_only": True,
            **({"kernel": kernel_record(choice)} if choice is not None and choice.pallas else {}),
        },
        unreported=unreported,
        source=workload_source(program.workload, choice is not None and choice.pallas),
        pipeline=dumped.pipeline,
        kernel_resources=kernels.resources,
        kernel_pipelines=kernels.pipelines,
        memory_report=report_of(plan, hlo, vmem=target.platform is Platform.TPU),
    )
