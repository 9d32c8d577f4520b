"""What a job needs from a worker, and whether a worker's capabilities meet it.

A job's requirements follow from its path, stages and device count (DESIGN.md, Flow):
`jax-gpu` needs platform gpu and `jax-tpu` platform tpu; a `cuda` job that only
compiles needs `cuda_compile`, one that executes needs `cuda_run`, and either needs a
worker that offers the cuda path (its engine can run it); `devices=N` needs N devices,
where `jax-cpu` may use virtual CPU devices up to the worker's `max_virtual_devices`.
A `jax-gpu` job never runs on a CPU worker.

A job with a target (`v6e:2x4`, `b200:1`, …) on a JAX path that only compiles goes to a
worker that compiles for that target without the hardware (its `targets`), or to a
worker with real devices of that model, enough of them. One that executes goes only to
the latter. A `cuda` job with a target needs what any cuda job needs (any CUDA compiler
builds for any architecture), and to execute, a GPU of the target's model.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from workers.protocol import (
    PATH_PLATFORM,
    Capabilities,
    JobSpec,
    PathId,
    StageId,
    Target,
    parse_target,
)


class Requirements(TypedDict):
    """Stored with each job as JSON (jobs stored before targets existed lack the last two)."""

    path: str
    platform: str
    devices: int
    cuda_compile: bool
    cuda_run: bool
    target: NotRequired[str | None]
    executes: NotRequired[bool]


def job_requirements(spec: JobSpec, devices: int) -> Requirements:
    """The requirements of `spec`, whose parameters span `devices` devices."""
    cuda = spec.path == PathId.CUDA
    executes = StageId.EXECUTE in spec.stages or StageId.SCALE in spec.stages
    return Requirements(
        path=spec.path.value,
        platform=PATH_PLATFORM[spec.path].value,
        devices=devices,
        cuda_compile=cuda,
        cuda_run=cuda and executes,
        target=spec.target,
        executes=executes,
    )


def has_real(caps: Capabilities, target: Target) -> bool:
    """Whether a worker has real devices of `target`'s model, at least its count."""
    return (
        caps.platform is target.platform
        and target.chip.matches(caps.device_kind)
        and caps.device_count >= target.count
    )


def _unmet_target(req: Requirements | dict[str, Any], caps: Capabilities) -> str | None:
    target = parse_target(str(req["target"]))
    path = PathId(req["path"])
    real = has_real(caps, target)
    if path == PathId.CUDA:
        if req["cuda_run"] and not real:
            return f"has no {target.chip.name} to run target {target.id} on"
        return None
    if real:
        return None if path in caps.paths else f"does not offer the {path.value} path"
    if req.get("executes"):
        return f"has no real {target.chip.name} devices ({target.count} needed to run {target.id})"
    if target.id not in caps.targets:
        return f"does not compile for target {target.id}"
    return None


def unmet(req: Requirements | dict[str, Any], caps: Capabilities) -> str | None:
    """Why a worker with `caps` cannot run a job needing `req`; None when it can."""
    path = PathId(req["path"])
    devices = int(req["devices"])
    if req.get("target"):
        problem = _unmet_target(req, caps)
        if problem is not None or path != PathId.CUDA:
            return problem
    if path == PathId.CUDA:
        if PathId.CUDA not in caps.paths:
            return "does not offer the cuda path"
        if req["cuda_run"]:
            if not caps.cuda_run:
                return "cannot run CUDA programs (cuda_run is false)"
        elif not caps.cuda_compile:
            return "cannot compile CUDA programs (cuda_compile is false)"
        if req["cuda_run"] and caps.device_count < devices:
            return f"has {caps.device_count} device(s), the job needs {devices}"
        return None
    if caps.platform.value != req["platform"]:
        # The guard that keeps a jax-gpu job off a CPU: JAX would fall back silently.
        return f"its platform is {caps.platform.value}, the job needs {req['platform']}"
    if path not in caps.paths:
        return f"does not offer the {path.value} path"
    available = caps.device_count
    if path == PathId.JAX_CPU:
        available = max(available, caps.max_virtual_devices)
    if available < devices:
        return f"has {available} device(s), the job needs {devices}"
    return None


def describe_need(req: Requirements | dict[str, Any]) -> str:
    """A short phrase naming what a job waits for, e.g. 'jax-gpu with 2 devices'."""
    text = str(req["path"])
    if req.get("target"):
        target = parse_target(str(req["target"]))
        if req.get("executes"):
            return f"{text} on {target.count} real {target.chip.name} device(s) ({target.id})"
        return f"{text} compiling for {target.id}"
    if req["path"] == PathId.CUDA.value:
        # Say which CUDA ability is missing, as /workers lists "cuda (compile only)".
        text += " (compile and execute)" if req["cuda_run"] else " (compile only)"
    devices = int(req["devices"])
    if devices > 1:
        text += f" with {devices} devices"
    return text
