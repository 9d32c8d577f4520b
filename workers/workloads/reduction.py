"""`reduction` on JAX: a sum or a softmax along one axis, accumulated in float32."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.reduction import ReductionOp, ReductionParams
from workers.workloads.base import (
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
)


def _softmax64(x: HostArray, axis: int) -> HostArray:
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    result: HostArray = e / e.sum(axis=axis, keepdims=True)
    return result


class Reduction(Workload[ReductionParams]):
    """A sum or softmax over one axis of a matrix.

    Narrow storage types are widened to float32 for the accumulation, as real code does:
    summing thousands of bfloat16 terms in bfloat16 loses most of the answer.
    """

    name = "reduction"
    params_type = ReductionParams

    def input_specs(self, params: ReductionParams) -> list[InputSpec]:
        return [InputSpec("x", (params.rows, params.cols), params.dtype.value)]

    def function(self, params: ReductionParams) -> JaxFunction:
        axis = params.axis
        if params.op is ReductionOp.SUM:

            def reduce_sum(x: jax.Array) -> jax.Array:
                return jnp.sum(x, axis=axis, dtype=jnp.float32).astype(x.dtype)

            return reduce_sum

        def softmax(x: jax.Array) -> jax.Array:
            return jax.nn.softmax(x.astype(jnp.float32), axis=axis).astype(x.dtype)

        return softmax

    def reference(self, params: ReductionParams, inputs: Sequence[HostArray]) -> HostArray:
        x = as_float64(inputs[0])
        if params.op is ReductionOp.SUM:
            result: HostArray = x.sum(axis=params.axis)
            return result
        return _softmax64(x, params.axis)
