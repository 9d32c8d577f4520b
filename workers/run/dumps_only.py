"""A follow-up job: the dumps of a run that went first (`workers.protocol.dumps`).

It traces and lowers the program for the target as the first part did, and compiles it
only as the dumps do (TPU bundles in a child process, GPU PTX through XLA's dump, the
pass pipeline with its per-pass dump). It has no timed compile, no memory and no
summary of its own: the first part has them, and the reader sees the two as one run.
"""

from __future__ import annotations

import time
from pathlib import Path

from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import KernelChoice, public_params
from workers.measure.publish import Measured
from workers.protocol import Artifacts, InputInfo, JobSpec, RunResult, StageSeconds, Target
from workers.run.base import PathUnavailable, Progress, emitter
from workers.run.deviceless import KERNEL_ARTIFACTS, refuse_execution
from workers.run.deviceless_report import (
    DEVICELESS_WARNING,
    Compiled,
    host_environment,
    target_report,
)
from workers.run.target_program import dump_below_hlo, lower_for_target

DUMPS_TIMING = (
    "compile: none timed here; this follow-up only dumps what lies below the optimized "
    "HLO of the run it completes (its compile is that run's)"
)


def run_dumps(
    job: JobSpec,
    params: WorkloadParams,
    target: Target,
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
    choice: KernelChoice | None = None,
    files_dir: Path | None = None,
) -> RunResult:
    """The dumps below the optimized HLO of `job` for `target`, as a run of their own."""
    started = time.perf_counter()
    emit = emitter(progress)
    refusal = refuse_execution(job, target)
    if refusal is not None:
        raise PathUnavailable(refusal)
    program = lower_for_target(
        job, params, target, emit, cache_dir=cache_dir, choice=choice, files_dir=files_dir
    )
    dumped = dump_below_hlo(program, job, target, emit)
    kernels = dumped.kernels
    specs = program.workload.input_specs(params)
    measured = Measured(
        job=job,
        params=public_params(params, job.path.value),
        environment=host_environment(target),
        started=started,
        inputs=[InputInfo(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in specs],
        stage_seconds=StageSeconds(trace=program.staged.trace_s, lower=program.staged.lower_s),
        artifacts=Artifacts(**{n: getattr(kernels, n) for n in KERNEL_ARTIFACTS}),
        warnings=[
            DEVICELESS_WARNING.format(id=target.id, count=target.count, name=target.chip.name)
        ],
        extra={"compile_only": True},
        unreported=dict(dumped.seconds),
        pipeline=dumped.pipeline,
        kernel_resources=kernels.resources,
        kernel_pipelines=kernels.pipelines,
    )
    measured.target = target_report(
        target,
        Compiled(None, None, 0.0),
        notes=[],
        dumped=dumped,
        mesh=None,
        timing=DUMPS_TIMING,
    )
    result = measured.check(None).publish()
    emit("done")
    return result
