"""`collective` on JAX: one collective over mesh axes, inside `shard_map`.

Each device's input is its shard of a 1-D array sharded over every mesh axis; the body
runs once per device and calls `lax.psum`, `lax.all_gather` or `lax.psum_scatter` over
the chosen axes, so the compiled program is that collective and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import jax
import numpy as np
from jax.sharding import Mesh

from workers.catalog.collective import CollectiveKind, CollectiveParams
from workers.scale.mesh import partition_spec
from workers.workloads.base import HostArray, InputSpec, JaxFunction, as_float64
from workers.workloads.scale_base import ScaleWorkload

# jax.lax's collectives, typed (jax leaves them unannotated).
_psum = cast("Callable[..., jax.Array]", jax.lax.psum)
_all_gather = cast("Callable[..., jax.Array]", jax.lax.all_gather)
_psum_scatter = cast("Callable[..., jax.Array]", jax.lax.psum_scatter)


class Collective(ScaleWorkload[CollectiveParams]):
    """A standalone all-reduce, all-gather or reduce-scatter."""

    name = "collective"
    params_type = CollectiveParams

    def input_specs(self, params: CollectiveParams) -> list[InputSpec]:
        return [InputSpec("x", (params.devices() * params.elements(),), params.dtype.value)]

    def mesh_function(self, params: CollectiveParams, mesh: Mesh) -> JaxFunction:
        over = params.over_axes()
        body: Callable[[jax.Array], jax.Array]
        if params.kind is CollectiveKind.ALL_REDUCE:

            def body(v: jax.Array) -> jax.Array:
                return _psum(v, over)

        elif params.kind is CollectiveKind.ALL_GATHER:

            def body(v: jax.Array) -> jax.Array:
                return _all_gather(v, over, tiled=True)

        else:

            def body(v: jax.Array) -> jax.Array:
                return _psum_scatter(v, over, scatter_dimension=0, tiled=True)

        x_layout, out_layout = params.arrays()
        # An all-gather's result is the same on every device of its group, but shard_map
        # cannot infer that, so the replication check is turned off for it alone.
        mapped = jax.shard_map(
            body,
            mesh=mesh,
            in_specs=partition_spec(x_layout.spec),
            out_specs=partition_spec(out_layout.spec),
            check_vma=params.kind is not CollectiveKind.ALL_GATHER,
        )

        def collective(x: jax.Array) -> jax.Array:
            result: jax.Array = mapped(x)
            return result

        return collective

    def reference(self, params: CollectiveParams, inputs: Sequence[HostArray]) -> HostArray:
        names = params.axis_names()
        over = [names.index(a) for a in params.over_axes()]
        rest = [names.index(a) for a in params.rest_axes()]
        grid = as_float64(inputs[0]).reshape((*params.mesh_shape(), params.elements()))
        last = len(names)
        if params.kind is CollectiveKind.ALL_GATHER:
            # Each group's buffers side by side, groups in mesh order.
            result: HostArray = np.transpose(grid, (*rest, *over, last)).reshape(-1)
            return result
        summed = grid.sum(axis=tuple(over), keepdims=True)
        # Both the sum and its scatter come out group after group, each group's sum whole.
        result = np.transpose(summed, (*rest, *over, last)).reshape(-1)
        return result

    def explain(self, params: CollectiveParams, kind: str, source: str | None) -> str:
        over = ", ".join(params.over_axes())
        call = {
            CollectiveKind.ALL_REDUCE: "lax.psum",
            CollectiveKind.ALL_GATHER: "lax.all_gather(tiled=True)",
            CollectiveKind.REDUCE_SCATTER: "lax.psum_scatter(tiled=True)",
        }[params.kind]
        size = params.group_size()
        if size == 1:
            return (
                f"Asked for directly: {call} over mesh axes ({over}) inside shard_map, but "
                "each replica group is a single device, so nothing is exchanged."
            )
        return (
            f"Asked for directly: {call} over mesh axes ({over}) inside shard_map; each "
            f"replica group is the {size} devices that share every other axis coordinate."
        )

    def no_collective_reason(self, params: CollectiveParams) -> str | None:
        if params.group_size() == 1:
            return (
                "The collective runs over groups of one device, so XLA removes it: there is "
                "nothing to exchange."
            )
        return None
