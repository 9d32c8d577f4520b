"""A compiled run first, its dumps after: what the follow-up job brings and how the two
become one run.

A compile without the hardware answers the user's first questions (the optimized HLO,
its summary, memory per device) when its compile ends. What lies below the HLO takes
one more compile each and can take several times as long: TPU bundles with their
schedules, GPU PTX and SASS with each kernel's registers, XLA:GPU's fusion reports, the
pass pipeline. With `JobSpec.dumps = later` the worker publishes the run without them,
and the server queues a follow-up job (`dumps = only`, id `dumps_job_id(parent)`) that
compiles again for them alone. A reader of the parent run sees them merged in
(`merge_dumps`) once the follow-up is done, and marked pending until then.
"""

from __future__ import annotations

from typing import Any

from workers.protocol.base import Dumps, PathId, StageId
from workers.protocol.jobs import JobSpec
from workers.protocol.runs import RunResult

DUMP_ARTIFACTS: tuple[str, ...] = ("bundles", "ptx", "sass")
"""The artifacts only a follow-up brings (the kernels' own IR, decoded from the lowered
program, comes with the first part)."""
STORED_APART: tuple[str, ...] = (*DUMP_ARTIFACTS, "pipeline")
"""What the server stores of a follow-up's run beside its JSON and reads for the run it
completes: the dumps, and XLA:GPU's fusion reports (stored as the pass pipeline)."""
SUFFIX = "-dumps"


def dumps_job_id(job_id: str) -> str:
    """The id of the follow-up job that brings `job_id`'s dumps."""
    return f"{job_id}{SUFFIX}"


def first_of(job_id: str) -> str | None:
    """The id of the run a follow-up job completes; None for any other job."""
    return job_id.removesuffix(SUFFIX) if job_id.endswith(SUFFIX) else None


def splits(spec: JobSpec) -> bool:
    """Whether a job compiled without the hardware would go first and leave its dumps
    to a follow-up: a compile-only job for a target on a JAX path, without
    measure.pipeline."""
    return (
        spec.target is not None
        and spec.path is not PathId.CUDA
        and list(spec.stages) == [StageId.COMPILE]
        # The pass pipeline asked for explains the run's fusions ("made by"), which the
        # server works out when the run arrives: such a run waits for it.
        and not spec.measure.pipeline
    )


def default_dumps(spec: JobSpec) -> Dumps:
    """What the server asks when the submission does not say."""
    return Dumps.LATER if splits(spec) else Dumps.INLINE


def wants_followup(spec: JobSpec, run: RunResult) -> bool:
    """Whether the server queues a follow-up for this stored run: the job asked for its
    dumps later, and the run was compiled without the hardware to an optimized HLO (a
    refused program has no machine code to dump)."""
    target = run.target
    return (
        spec.dumps is Dumps.LATER
        and splits(spec)
        and target is not None
        and target.deviceless
        and target.refused is None
        and bool(run.artifacts.hlo)
    )


def expected_dumps(spec: dict[str, Any]) -> list[str]:
    """The artifact names a pending follow-up is expected to bring, for the links that
    say "pending" until it does: a GPU target's PTX and SASS, a TPU slice's bundles."""
    target = str(spec.get("target") or "")
    return ["bundles"] if target.startswith("v") else ["ptx", "sass"]


def merge_dumps(first: RunResult, dumps: RunResult) -> RunResult:
    """The run `first` with what its follow-up `dumps` brought: the artifacts below the
    HLO, the kernels' schedules and resources, the pass pipelines, how the dump was
    made, and the follow-up's notes and untimed seconds. Nothing the first part measured
    is replaced."""
    artifacts = first.artifacts.model_copy(
        update={
            name: getattr(dumps.artifacts, name)
            for name in DUMP_ARTIFACTS
            if getattr(first.artifacts, name) is None
        }
    )
    update: dict[str, Any] = {
        "artifacts": artifacts,
        "kernel_resources": first.kernel_resources or dumps.kernel_resources,
        "kernel_pipelines": {**dumps.kernel_pipelines, **first.kernel_pipelines},
        "pipeline": first.pipeline or dumps.pipeline,
    }
    if first.target is not None and dumps.target is not None:
        notes = first.target.notes + [n for n in dumps.target.notes if n not in first.target.notes]
        update["target"] = first.target.model_copy(
            update={
                "kernels": first.target.kernels or dumps.target.kernels,
                "dump": first.target.dump or dumps.target.dump,
                "notes": notes,
            }
        )
    spent = dumps.extra.get("unreported_s")
    if isinstance(spent, dict) and spent:
        mine = first.extra.get("unreported_s")
        dumped = {f"dumps.{k}": v for k, v in spent.items()}
        update["extra"] = {**first.extra, "unreported_s": {**(mine or {}), **dumped}}
    return first.model_copy(update=update)
