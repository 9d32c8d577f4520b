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
    """A mesh over the first prod(shape) of `devices`, with Auto axes.

    TPU chips are laid out by `mesh_utils.create_device_mesh`, which follows the slice's
    physical torus (a ring of 8 chips on a 2x4 slice is 0 1 2 3 7 6 5 4, not 0…7), so
    neighbours on a mesh axis are neighbours on the interconnect. Other devices keep
    their order.
    """
    count = math.prod(shape)
    if len(devices) < count:
        raise ValueError(f"a mesh of {count} devices needs {count}; given {len(devices)}")
    chosen = list(devices[:count])
    grid = None
    if chosen and chosen[0].platform == "tpu" and count == len(devices):
        from jax.experimental import mesh_utils

        try:
            grid = mesh_utils.create_device_mesh(
                shape, devices=chosen, allow_split_physical_axes=True
            )
        except (ValueError, NotImplementedError, AssertionError):
            grid = None  # a shape it cannot fit to the torus: keep the listed order
    if grid is None:
        grid = np.array(chosen, dtype=object).reshape(shape)
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
