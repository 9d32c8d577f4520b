"""Calling a deserialized artifact: its arguments rebuilt from their flat list, placed on
a mesh like the one it was exported with.

An artifact exported for N devices keeps its mesh's axis names and sizes, and each
argument's sharding. `argument_shardings` rebuilds those shardings on any N devices in
order (a target's first N in topology order, or N virtual CPU devices); jax refuses to
call an N-device artifact in a context of any other device count. A one-device artifact
goes on the first device given.

`exp.in_shardings_jax(mesh)` wants a mesh with the export's axis names, sizes and types.
The types (Auto, Explicit) are kept only in a private field (`_in_named_shardings`); where
a jax release drops it, the module's `sdy.mesh` still gives the names and sizes, and the
axes are taken to be Auto.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import numpy as np

_SDY_MESH = re.compile(r"sdy\.mesh\s+@\w+\s*=\s*<\[([^\]]*)\]")
_SDY_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_partition_spec = cast("Callable[..., Any]", jax.sharding.PartitionSpec)

MeshShape = tuple[tuple[str, ...], tuple[int, ...], tuple[Any, ...]]


class MeshError(ValueError):
    """The artifact's mesh cannot be rebuilt on the devices given; the message says why."""


def export_mesh_shape(exp: Any) -> MeshShape | None:
    """(axis names, sizes, types) of the mesh the artifact was exported with, or None."""
    for sharding in (
        *getattr(exp, "_in_named_shardings", ()),
        *getattr(exp, "_out_named_shardings", ()),
    ):
        mesh = getattr(sharding, "mesh", None)
        if mesh is not None and getattr(mesh, "axis_names", None):
            return tuple(mesh.axis_names), tuple(mesh.axis_sizes), tuple(mesh.axis_types)
    found = _SDY_MESH.search(exp.mlir_module())
    if found is None:
        return None
    axes = _SDY_AXIS.findall(found[1])
    if not axes:
        return None
    auto = jax.sharding.AxisType.Auto
    return tuple(a for a, _ in axes), tuple(int(s) for _, s in axes), tuple(auto for _ in axes)


def artifact_mesh(exp: Any, devices: Sequence[Any]) -> Any | None:
    """The export's mesh rebuilt on the first N of `devices`; None for one device."""
    n = int(exp.nr_devices)
    if n == 1:
        return None
    if len(devices) < n:
        raise MeshError(
            f"the artifact was exported for {n} devices and only {len(devices)} are here"
        )
    shape = export_mesh_shape(exp)
    if shape is None:
        raise MeshError(f"the artifact was exported for {n} devices but names no mesh")
    names, sizes, types = shape
    grid = np.array(list(devices[:n]), dtype=object).reshape(sizes)
    return jax.sharding.Mesh(grid, names, axis_types=types)


def argument_shardings(exp: Any, devices: Sequence[Any]) -> list[Any]:
    """Each flat argument's sharding on `devices`, as the export placed it (replicated
    where the export left it unspecified)."""
    mesh = artifact_mesh(exp, devices)
    if mesh is None:
        return [jax.sharding.SingleDeviceSharding(devices[0])] * len(exp.in_avals)
    replicated = jax.sharding.NamedSharding(mesh, _partition_spec())
    return [s if s is not None else replicated for s in exp.in_shardings_jax(mesh)]


def flat_call(exp: Any) -> Callable[..., list[Any]]:
    """The artifact as a function of its flat arguments, returning its flat results:
    the arguments are rebuilt into the artifact's own tree (`in_tree`), so a function of
    keyword arguments and nested dicts is called as it was exported."""

    def call(*leaves: Any) -> list[Any]:
        args, kwargs = jax.tree.unflatten(exp.in_tree, list(leaves))
        return list(jax.tree.leaves(exp.call(*args, **kwargs)))

    call.__name__ = call.__qualname__ = str(exp.fun_name)
    return call
