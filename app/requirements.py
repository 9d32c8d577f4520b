"""What a job needs from a worker, and whether a worker's capabilities meet it.

A job's requirements follow from its path, stages and device count (DESIGN.md, Flow):
`jax-gpu` needs platform gpu and `jax-tpu` platform tpu; a `cuda` job that only
compiles needs `cuda_compile`, one that executes needs `cuda_run`, and either needs a
worker that offers the cuda path (its engine can run it); `devices=N` needs N devices,
where `jax-cpu` may use virtual CPU devices up to the worker's `max_virtual_devices`.
A `jax-gpu` job never runs on a CPU worker.
"""

from __future__ import annotations

from typing import Any, TypedDict

from workers.protocol import PATH_PLATFORM, Capabilities, JobSpec, PathId, StageId


class Requirements(TypedDict):
    """Stored with each job as JSON."""

    path: str
    platform: str
    devices: int
    cuda_compile: bool
    cuda_run: bool


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
    )


def unmet(req: Requirements | dict[str, Any], caps: Capabilities) -> str | None:
    """Why a worker with `caps` cannot run a job needing `req`; None when it can."""
    path = PathId(req["path"])
    devices = int(req["devices"])
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
    if req["path"] == PathId.CUDA.value:
        # Say which CUDA ability is missing, as /workers lists "cuda (compile only)".
        text += " (compile and execute)" if req["cuda_run"] else " (compile only)"
    devices = int(req["devices"])
    if devices > 1:
        text += f" with {devices} devices"
    return text
