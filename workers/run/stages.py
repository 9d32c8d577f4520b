"""What the engine and the deviceless runner (`workers.run.deviceless`) both do before
they compile, each under its own policy: the workload readied for the job, its inputs as
abstract values placed where it runs, and the first two of JAX's stages, timed alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from workers.catalog.base import WorkloadParams
from workers.catalog.target_rules import job_target
from workers.compiler.jaxtyped import shape_dtype_struct
from workers.protocol import JobSpec
from workers.run.base import Emit
from workers.workloads import get_workload
from workers.workloads.base import Workload


class Lowered(NamedTuple):
    """A program traced and lowered, ready for compiling, with each stage's wall time."""

    traced: Any
    lowered: Any
    trace_s: float
    lower_s: float


def bind_workload(
    job: JobSpec, params: WorkloadParams, files_dir: Path | None, max_bytes: int
) -> Workload[Any]:
    """The job's workload, readied for it: an exported function loads and checks its
    stored files here, before anything is traced (CatalogError naming the field)."""
    workload: Workload[Any] = get_workload(job.workload)
    bind = getattr(workload, "bind", None)
    if bind is not None:
        target = job_target(job)
        bound: Workload[Any] = bind(params, job.path, files_dir, max_bytes, target=target)
        return bound
    return workload


def single_device_inputs(workload: Workload[Any], params: WorkloadParams, device: Any) -> list[Any]:
    """The workload's inputs as abstract values placed on `device` (no array is made)."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return [
        shape_dtype_struct(s.shape, jnp.dtype(s.dtype), sharding=sharding)
        for s in workload.input_specs(params)
    ]


def placed_inputs(
    workload: Workload[Any], params: WorkloadParams, devices: list[Any]
) -> tuple[list[Any], list[Any] | None]:
    """The workload's inputs as abstract values placed where it runs, and the shardings
    its arrays are placed with (None: all on the first device). An exported function
    spans the devices it was exported for, with the export's own shardings."""
    shardings = getattr(workload, "shardings", None)
    if shardings is None:
        return single_device_inputs(workload, params, devices[0]), None
    found: list[Any] = shardings(params, devices)
    abstract = [
        shape_dtype_struct(s.shape, jnp.dtype(s.dtype), sharding=sharding)
        for s, sharding in zip(workload.input_specs(params), found, strict=True)
    ]
    return abstract, found


def trace_and_lower(jitted: Any, abstract: list[Any], emit: Emit) -> Lowered:
    """Trace, then lower, `jitted` for `abstract` inputs, each timed alone."""
    clock = time.perf_counter
    t0 = clock()
    traced = jitted.trace(*abstract)
    trace_s = clock() - t0
    emit("traced")
    t0 = clock()
    lowered = traced.lower()
    lower_s = clock() - t0
    emit("lowered")
    return Lowered(traced, lowered, trace_s, lower_s)
