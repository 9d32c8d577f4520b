"""How a target combines with a job's path, workload and device count. No jax here.

Every rule refuses with the field at fault named, so the server answers 422 and
`boundary run` exits 2 before anything is imported or compiled:

- A TPU slice (`v4`, `v5e`, `v5p`, `v6e`, `tpu7x`) goes only with `jax-tpu`; `b200`,
  `h100` and `h200` with `jax-gpu` or `cuda` (where the target picks the SM
  architecture). Any other pairing names both; a job with no path takes its target's.
- A scale workload spans the target's devices: `devices` defaults to the target's count,
  and a different count is refused naming both. An exported function spans the devices
  it was exported for, on a target with at least that many (checked where its artifact is
  read: `check_target_devices`). Every other workload, and `cuda`, runs on one device, so
  its target must have a count of 1.
- A few workloads take no target at all (they say why).

Whether a target is compiled without its hardware depends on where the job runs: that,
and refusing to execute such a program, is the runner's part (workers.run.deviceless).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workers.catalog import WORKLOADS, CatalogError
from workers.catalog.kernels import KernelChoice, KernelRefused, choose_kernel
from workers.catalog.mesh import MeshParams
from workers.catalog.pallas_limits import Gpu
from workers.protocol import (
    JobSpec,
    PathId,
    Platform,
    StageId,
    Target,
    one_device_target,
    parse_target,
)

__all__ = [
    "COMPILE_ONLY_CAP",
    "apply_target",
    "byte_cap",
    "check_target_platforms",
    "job_kernel",
    "job_target",
    "placement_on",
]

JAX_PLATFORM_OF: dict[Platform, str] = {
    Platform.CPU: "cpu",
    Platform.GPU: "cuda",
    Platform.TPU: "tpu",
}
"""The jax.export platform name a target's compiler builds for."""

COMPILE_ONLY_CAP = 2**62
"""The byte cap of a job that only compiles for a target: in effect none."""


def job_target(job: JobSpec) -> Target | None:
    """The parsed target of `job`, or None when it has none."""
    return parse_target(job.target) if job.target else None


def _pairing(target: Target, path: PathId) -> None:
    if path in target.chip.paths:
        return
    goes_with = " or ".join(p.value for p in target.chip.paths)
    raise CatalogError(
        f"target: {target.id} does not go with path {path.value}; a {target.model.value} "
        f"target goes with {goes_with}",
        "target",
    )


def apply_target(job: JobSpec) -> JobSpec:
    """`job` with its target's defaults filled in (a scale workload's `devices`).

    Raises CatalogError naming the field when the target does not combine with the
    path, the workload or its device count. A job without a target comes back as it is.
    """
    target = job_target(job)
    if target is None:
        return job
    _pairing(target, job.path)
    cls = WORKLOADS.get(job.workload)
    if cls is None:
        return job  # parse_params names the unknown workload
    if cls.no_target is not None:
        raise CatalogError(f"target: {job.workload} takes no target: {cls.no_target}", "target")
    if cls.spans_artifact_devices:
        return job
    spans = issubclass(cls, MeshParams) and job.path is not PathId.CUDA
    if not spans:
        if target.count != 1:
            what = "the cuda path" if job.path is PathId.CUDA else job.workload
            one = one_device_target(target.model)
            use = (
                f"use {one}"
                if one is not None
                else f"{target.model.value} sells no slice of one device; use v5e:1x1 or v6e:1x1"
            )
            raise CatalogError(
                f"target: {what} runs on one device and {target.id} has {target.count}; "
                f"{use}, or a scale workload (sharded-matmul, collective) to span several",
                "target",
            )
        return job
    given = job.params.get("devices")
    if given is None:
        params = {**job.params, "devices": target.count}
        return job.model_copy(update={"params": params})
    if given != target.count:
        raise CatalogError(
            f"params.devices: devices={given} does not match target {target.id}, which has "
            f"{target.count} devices; leave devices out or set devices={target.count}",
            "params.devices",
        )
    return job


def job_kernel(job: JobSpec, params: Any, gpu: Gpu | None = None) -> KernelChoice:
    """The implementation `job` runs (workers.catalog.kernels), or CatalogError naming the
    parameter at fault: the same rule for the server's 422 and `boundary run`'s exit 2."""
    try:
        choice = choose_kernel(job.workload, job.path, job_target(job), params, gpu)
    except KernelRefused as exc:
        raise CatalogError(f"{exc.field}: {exc}", exc.field) from None
    if choice.pallas and StageId.SCALE in job.stages:
        raise CatalogError(
            "stages: the scale stage's series is not offered with kernel=pallas: its points "
            "re-shard the problem over other meshes, and the kernel's block sizes are checked "
            "for the job's own (run compile and execute, or kernel=xla)",
            "stages",
        )
    return choice


def byte_cap(job: JobSpec, max_bytes: int) -> int:
    """The cap on `job`'s input and output bytes.

    The cap keeps a job from exhausting a worker's memory with the arrays it places. A
    job that only compiles for a target places no array anywhere (the engine makes inputs
    only to execute), and whether its program fits is what it asks: the compiler's
    memory_analysis() answers that, against the chip's HBM, so no cap applies.
    """
    if job.target and all(s is StageId.COMPILE for s in job.stages):
        return COMPILE_ONLY_CAP
    return max_bytes


def check_target_platforms(target: Target, platforms: Sequence[str], nr_devices: int) -> None:
    """Refuse (CatalogError naming `target`) an artifact exported for `platforms` and
    `nr_devices` devices that `target` cannot take: another platform, or fewer devices."""
    wanted = JAX_PLATFORM_OF[target.platform]
    if wanted not in platforms:
        raise CatalogError(
            f"target: the artifact was exported for {', '.join(platforms)} only, and "
            f"{target.id} needs {wanted}: export it again with --platforms "
            f"{','.join([*platforms, wanted])}",
            "target",
        )
    if nr_devices > target.count:
        raise CatalogError(
            f"target: the artifact was exported for {nr_devices} devices and {target.id} has "
            f"{target.count}: compile it for a target with at least {nr_devices} devices, or "
            f"export it for {target.count}",
            "target",
        )


def placement_on(target: Target, nr_devices: int) -> str:
    """Which of `target`'s devices an artifact exported for `nr_devices` is compiled on."""
    if nr_devices == target.count:
        if nr_devices == 1:
            return f"the one device of {target.id}"
        return f"all {nr_devices} devices of {target.id}"
    if nr_devices == 1:
        return f"one device of {target.id}'s {target.count} (the artifact was exported for one)"
    return (
        f"a mesh of {nr_devices} of the {target.count} devices of {target.id} (the first "
        f"{nr_devices} in topology order): the artifact was exported for {nr_devices}"
    )
