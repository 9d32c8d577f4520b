"""`gather` on JAX: rows of a table fetched at random indices."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.gather import GatherParams
from workers.workloads.base import (
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
    random_normal,
)


class Gather(Workload[GatherParams]):
    """out[i, :] = table[index[i], :] with indices drawn uniformly at random."""

    name = "gather"
    params_type = GatherParams

    def input_specs(self, params: GatherParams) -> list[InputSpec]:
        return [
            InputSpec("table", (params.rows, params.width), params.dtype.value),
            InputSpec("index", (params.count,), "int32"),
        ]

    def make_inputs(self, params: GatherParams, rng: np.random.Generator) -> list[HostArray]:
        table_spec, _ = self.input_specs(params)
        table = random_normal(table_spec, rng)
        index = rng.integers(0, params.rows, size=params.count, dtype=np.int32)
        return [table, index]

    def function(self, params: GatherParams) -> JaxFunction:
        def gather(table: jax.Array, index: jax.Array) -> jax.Array:
            # Indices are in range by construction; "clip" keeps the semantics defined.
            return jnp.take(table, index, axis=0, mode="clip")

        return gather

    def reference(self, params: GatherParams, inputs: Sequence[HostArray]) -> HostArray:
        table, index = inputs
        result: HostArray = as_float64(table)[index]
        return result
