"""The first two of JAX's stages, timed alone: what the engine and the deviceless runner
(`workers.run.deviceless`) both do before they compile, each under its own policy."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from workers.catalog.base import WorkloadParams
from workers.compiler.jaxtyped import shape_dtype_struct
from workers.run.base import Emit
from workers.workloads.base import Workload


class Lowered(NamedTuple):
    """A program traced and lowered, ready for compiling, with each stage's wall time."""

    traced: Any
    lowered: Any
    trace_s: float
    lower_s: float


def single_device_inputs(workload: Workload[Any], params: WorkloadParams, device: Any) -> list[Any]:
    """The workload's inputs as abstract values placed on `device` (no array is made)."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return [
        shape_dtype_struct(s.shape, jnp.dtype(s.dtype), sharding=sharding)
        for s in workload.input_specs(params)
    ]


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
