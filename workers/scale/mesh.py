"""Meshes and shardings built from a scale workload's catalog parameters.

Axis types are chosen deliberately: `jax.make_mesh` now defaults to Explicit axes, which
reject a sharded contraction unless every output sharding is spelled out. The scale
workloads want the compiler to decide (and show) what communication a layout implies,
so every mesh here uses Auto axes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from workers.catalog.mesh import ArrayLayout, MeshParams, Spec

_partition_spec = cast("Callable[..., PartitionSpec]", PartitionSpec)
"""PartitionSpec's constructor, typed (jax leaves it unannotated)."""


def build_mesh(devices: Sequence[Any], shape: tuple[int, ...], axes: tuple[str, ...]) -> Mesh:
    """A mesh over the first prod(shape) of `devices`, in order, with Auto axes."""
    count = math.prod(shape)
    if len(devices) < count:
        raise ValueError(f"a mesh of {count} devices needs {count}; given {len(devices)}")
    grid = np.array(list(devices[:count]), dtype=object).reshape(shape)
    return Mesh(grid, axes, axis_types=(AxisType.Auto,) * len(axes))


def mesh_for(params: MeshParams, devices: Sequence[Any]) -> Mesh:
    """The mesh `params` describe, laid over `devices`."""
    return build_mesh(devices, params.mesh_shape(), params.axis_names())


def partition_spec(spec: Spec) -> PartitionSpec:
    """A jax PartitionSpec from the catalog's spec tuples."""
    entries: list[str | tuple[str, ...] | None] = []
    for entry in spec:
        if not entry:
            entries.append(None)
        elif len(entry) == 1:
            entries.append(entry[0])
        else:
            entries.append(entry)
    return _partition_spec(*entries)


def sharding_of(mesh: Mesh, layout: ArrayLayout) -> NamedSharding:
    """Where `layout`'s array lives on `mesh`."""
    return NamedSharding(mesh, partition_spec(layout.spec))


def process_count() -> int:
    """How many processes share the devices (1 unless jax.distributed is running)."""
    return int(jax.process_count())
