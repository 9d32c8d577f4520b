"""A program lowered for a target whose devices are not here, and the dumps below its
optimized HLO: the steps `workers.run.deviceless` runs in order (lower → compile → dump
→ report), and that a follow-up job (`workers.protocol.dumps`) runs without the compile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import KernelChoice
from workers.catalog.target_rules import COMPILE_ONLY_CAP
from workers.compiler.compile_cache import apply_cache_policy, default_cache_dir
from workers.compiler.pipeline import capture_pipeline, max_bytes_from_env
from workers.compiler.source_tags import Tagged, tag_sources
from workers.pallas.lowering import lowering_for
from workers.protocol import CachePolicy, JobSpec, PipelineCapture, Platform, Target
from workers.run.base import Emit
from workers.run.kernel_dumps import KernelArtifacts, Lowered, dump_artifacts
from workers.run.stages import Lowered as Staged
from workers.run.stages import bind_workload, placed_inputs, trace_and_lower
from workers.scale.prepare import Prepared as ScaledProgram
from workers.scale.prepare import prepare as prepare_scale
from workers.workloads.base import Workload, function_for
from workers.xla_targets.dump_child import mesh_of, placement_of
from workers.xla_targets.kernel_ir import kernel_ir
from workers.xla_targets.topology import target_devices


@dataclass(frozen=True)
class TargetProgram:
    """The job's program traced and lowered for the target's devices (never placed on
    any: nothing here runs)."""

    workload: Workload[Any]
    devices: list[Any]
    scaled: ScaledProgram | None
    jitted: Any
    abstract: list[Any]
    staged: Staged
    tagged: Tagged
    """An uploaded program's ops tagged with their source, before the compile."""
    choice: KernelChoice | None

    @property
    def mesh(self) -> Any | None:
        return self.scaled.mesh if self.scaled is not None else None

    @property
    def lowered(self) -> Any:
        return self.staged.lowered


def lower_for_target(
    job: JobSpec,
    params: WorkloadParams,
    target: Target,
    emit: Emit,
    *,
    cache_dir: Path | None,
    choice: KernelChoice | None,
    files_dir: Path | None,
) -> TargetProgram:
    """Bind the workload, build its function (a scale workload's over the target's mesh)
    and trace and lower it for the target, always cold: a persistent-cache hit would
    skip the compiler and leave no dump."""
    # Nothing is placed anywhere: no byte cap (workers.catalog.target_rules.byte_cap).
    workload = bind_workload(job, params, files_dir, COMPILE_ONLY_CAP)
    devices = list(target_devices(target))
    apply_cache_policy(CachePolicy.COLD, cache_dir or default_cache_dir())
    scaled = prepare_scale(workload, params, devices, choice)
    if scaled is None:
        jitted = jax.jit(function_for(workload, params, choice))
        abstract, _ = placed_inputs(workload, params, devices)
    else:
        jitted, abstract = scaled.jitted, scaled.abstract
    with lowering_for(choice, scaled.mesh if scaled is not None else None, devices[0]):
        staged = trace_and_lower(jitted, abstract, emit)
    tagged = tag_sources(workload, staged.lowered, params)
    return TargetProgram(workload, devices, scaled, jitted, abstract, staged, tagged, choice)


@dataclass
class Dumped:
    """What the dumps gave: the kernels below the HLO, the pass pipeline, and the untimed
    seconds each took."""

    kernels: KernelArtifacts
    pipeline: PipelineCapture | None
    seconds: dict[str, float]


def decoded_only(program: TargetProgram, target: Target) -> KernelArtifacts:
    """The kernels' own IR as the lowered program holds it (no compile): what a run that
    goes first carries, its machine code left to the follow-up."""
    decoded = kernel_ir(program.lowered)
    if target.platform is Platform.TPU:
        return KernelArtifacts(mosaic=decoded.mosaic)
    return KernelArtifacts(triton=decoded.triton, mosaic_gpu=decoded.mosaic_gpu)


def dump_below_hlo(program: TargetProgram, job: JobSpec, target: Target, emit: Emit) -> Dumped:
    """Compile again for what lies below the HLO (TPU bundles, GPU PTX and SASS, each
    Pallas kernel's IR) and, with measure.pipeline, once more for the pass pipeline;
    none of it timed as the compile. An exported program over several devices is placed
    by its own arguments' mesh."""
    mesh = program.mesh
    place = placement_of(
        target.id, mesh or mesh_of(program.abstract), program.devices[0], job.compiler_options
    )
    lowered = Lowered(
        program.jitted, program.abstract, program.lowered, place, mesh, program.devices[0],
        program.choice,
    )  # fmt: skip
    kernels = dump_artifacts(
        lowered, target, passes=job.measure.pipeline, max_bytes=max_bytes_from_env()
    )
    emit("compiled", message="machine code dumped")
    seconds = dict(kernels.seconds)
    gpu = target.platform is Platform.GPU
    pipeline = PipelineCapture(files=kernels.reports) if gpu and kernels.reports else None
    if job.measure.pipeline:  # its own compile, with the per-pass dump
        t0 = time.perf_counter()
        pipeline = capture_pipeline(program.lowered, max_bytes_from_env(), job.compiler_options)
        seconds["pipeline_compile"] = time.perf_counter() - t0
    return Dumped(kernels, pipeline, seconds)
