"""`reduction` on JAX: a sum or a softmax along one axis, accumulated in float32."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.reduction import ReductionOp, ReductionParams
from workers.workloads.base import (
    UNIT_ROUNDOFF,
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
)

# Rounding the result to the storage type: one unit roundoff per element, with margin.
_OUTPUT_ERROR: dict[str, float] = {"float32": 1e-6, "bfloat16": 1e-2, "float16": 2e-3}

# Flops per input element: a sum adds once; a softmax takes a max, a subtraction, an
# exponential, an add for the normalizer and a division.
_FLOPS_PER_ELEMENT: dict[ReductionOp, int] = {ReductionOp.SUM: 1, ReductionOp.SOFTMAX: 5}


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

    def flop_count(self, params: ReductionParams) -> float:
        return float(_FLOPS_PER_ELEMENT[params.op] * params.rows * params.cols)

    def byte_count(self, params: ReductionParams) -> float:
        return float(params.input_bytes())

    def tolerance(self, params: ReductionParams) -> float:
        # The float32 accumulation adds rounding errors that grow like √length.
        accumulate = 4 * UNIT_ROUNDOFF["float32"] * math.sqrt(params.reduced_length())
        return _OUTPUT_ERROR[params.dtype.value] + accumulate
