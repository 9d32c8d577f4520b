"""The scale stage's additions to a run: its placement and, when asked, its series."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workers.measure.publish import Measured
from workers.protocol import JobSpec, ProgressEvent, StageId
from workers.scale.placement import placement_report
from workers.scale.prepare import Prepared
from workers.scale.series import run_series


def attach_scale(
    result: Measured,
    prepared: Prepared,
    compiled: Any,
    job: JobSpec,
    devices: Sequence[Any],
    *,
    seed: int = 0,
    progress: Callable[[ProgressEvent], None] | None = None,
) -> None:
    """Fill `result.placement`, and `result.scaling` when the job asks for the scale stage.

    The series goes to the publish step raw: each point keeps its samples and its own
    `correct` flag, and publishing withholds the times of any point that failed."""
    result.placement = placement_report(prepared, compiled, result.artifacts.hlo)
    if prepared.output_digest is not None:
        result.extra["output_sha256"] = prepared.output_digest
    if result.placement.note and result.placement.note not in result.warnings:
        result.warnings.append(result.placement.note)
    if StageId.SCALE in job.stages:
        result.scaling = run_series(
            prepared.workload,
            prepared.params,
            devices,
            job.measure,
            seed=seed,
            progress=progress,
            compiler_options=dict(job.compiler_options),
        )
