"""A scale workload made ready for the engine: mesh, shardings, jitted function, and
how inputs are placed and outputs brought back.

The engine's single-device path puts inputs on one device; a scale workload's inputs are
cut into shards, each placed on its own device (only the local ones when several
processes share the mesh), and its output may be spread over devices other processes own.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import KernelChoice
from workers.catalog.mesh import ArrayLayout, MeshParams
from workers.compiler.jaxtyped import shape_dtype_struct
from workers.measure.harness import block_all
from workers.scale.mesh import mesh_for, sharding_of
from workers.workloads.base import HostArray, Workload
from workers.workloads.scale_base import ScaleWorkload


@dataclass
class Prepared:
    """A scale workload bound to a mesh: ready to trace, place inputs on, and run."""

    workload: ScaleWorkload[Any]
    params: MeshParams
    mesh: Mesh
    layouts: list[ArrayLayout]
    """Every input in call order, then the output."""
    in_shardings: list[NamedSharding]
    out_sharding: NamedSharding
    jitted: Any
    abstract: list[Any]
    """ShapeDtypeStructs of the inputs, each carrying its sharding."""
    output_digest: str | None = None
    """SHA-256 of the last output brought to the host."""

    def place(self, host_inputs: Sequence[HostArray]) -> list[jax.Array]:
        """Each input cut into its shards, every local shard on its device, all ready."""
        placed: list[jax.Array] = []
        for host, sharding in zip(host_inputs, self.in_shardings, strict=True):
            placed.append(
                jax.make_array_from_callback(
                    host.shape, sharding, functools.partial(_slice_of, host)
                )
            )
        return block_all(placed)

    def to_host(self, output: Any) -> HostArray:
        """The whole output on this host, gathered from other processes when it must be.

        Its SHA-256 is kept in `output_digest`, so runs (and the processes of a group)
        can be compared bit for bit.
        """
        if getattr(output, "is_fully_addressable", True):
            whole = np.asarray(output)
        else:
            from jax.experimental import multihost_utils

            # Every process must call this together: it is itself a collective.
            whole = np.asarray(multihost_utils.process_allgather(output, tiled=True))
        self.output_digest = hashlib.sha256(np.ascontiguousarray(whole).tobytes()).hexdigest()
        return whole


def _slice_of(host: HostArray, index: tuple[slice, ...]) -> HostArray:
    return host[index]


@functools.lru_cache(maxsize=32)
def _jit(
    workload: ScaleWorkload[Any], params: MeshParams, mesh: Mesh, choice: KernelChoice | None
) -> Any:
    """The jitted function for one mesh, kept so the `warm` policy can reuse its caches."""
    layouts = params.arrays()
    return jax.jit(
        workload.mesh_function_for(params, mesh, choice),
        in_shardings=tuple(sharding_of(mesh, layout) for layout in layouts[:-1]),
        out_shardings=sharding_of(mesh, layouts[-1]),
    )


def prepare(
    workload: Workload[Any],
    params: WorkloadParams,
    devices: Sequence[Any],
    choice: KernelChoice | None = None,
) -> Prepared | None:
    """`workload` laid over `devices` (its Pallas kernel when `choice` says so); None for
    a workload that runs on one device."""
    if not isinstance(workload, ScaleWorkload) or not isinstance(params, MeshParams):
        return None
    mesh = mesh_for(params, devices)
    layouts = params.arrays()
    in_shardings = [sharding_of(mesh, layout) for layout in layouts[:-1]]
    specs = workload.input_specs(params)
    abstract = [
        shape_dtype_struct(spec.shape, jnp.dtype(spec.dtype), sharding=sharding)
        for spec, sharding in zip(specs, in_shardings, strict=True)
    ]
    return Prepared(
        workload=workload,
        params=params,
        mesh=mesh,
        layouts=layouts,
        in_shardings=in_shardings,
        out_sharding=sharding_of(mesh, layouts[-1]),
        jitted=_jit(workload, params, mesh, choice),
        abstract=abstract,
    )
