"""`matmul` on JAX: C = A @ B at the requested contraction precision."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.base import Dtype, Precision
from workers.catalog.kernels import KernelChoice
from workers.catalog.matmul import MatmulParams
from workers.pallas import matmul as pallas_matmul
from workers.workloads.base import (
    LAX_PRECISION,
    UNIT_ROUNDOFF,
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
)

# Allowed relative error of a float32 product by requested precision. Backends differ in
# what DEFAULT means: the CPU computes in full float32, a GPU may use TF32 (10-bit
# mantissa) and a TPU a single bfloat16 pass (7-bit mantissa, relative error near 2^-9
# per product), so DEFAULT must admit bfloat16-level error. HIGH is TF32 on a GPU and
# three bfloat16 passes on a TPU: about 2^-11 per product, hence 2e-3 with margin.
# HIGHEST is full float32; see `tolerance` for how it grows with k.
_FLOAT32_TOLERANCE: dict[Precision, float] = {
    Precision.DEFAULT: 1e-2,
    Precision.HIGH: 2e-3,
    Precision.HIGHEST: 1e-5,
}

# Narrow storage types are dominated by rounding the output itself: about 2^-8 for
# bfloat16 and 2^-11 for float16 per element, whatever the contraction precision.
_NARROW_TOLERANCE: dict[Dtype, float] = {Dtype.BFLOAT16: 2e-2, Dtype.FLOAT16: 5e-3}


def contraction_tolerance(dtype: Dtype, precision: Precision, length: int) -> float:
    """Allowed relative error of a contraction over `length` terms.

    In full float32 the rounding errors of `length` accumulated terms of random sign grow
    like √length; four unit roundoffs per √term keeps the bound honest at large `length`
    while staying near 1e-5 for ordinary sizes.
    """
    if dtype is not Dtype.FLOAT32:
        return _NARROW_TOLERANCE[dtype]
    if precision is Precision.HIGHEST:
        grown = 4 * UNIT_ROUNDOFF["float32"] * math.sqrt(length)
        return max(_FLOAT32_TOLERANCE[precision], grown)
    return _FLOAT32_TOLERANCE[precision]


def product_reference(inputs: Sequence[HostArray]) -> HostArray:
    """A @ B in float64: the reference of every dense product, however it is laid out."""
    a, b = inputs
    result: HostArray = np.matmul(as_float64(a), as_float64(b))
    return result


def product_flops(m: int, n: int, k: int) -> float:
    """FLOPs of an (m × k) @ (k × n) product: one multiply and one add per term of every
    output element."""
    return 2.0 * m * n * k


class Matmul(Workload[MatmulParams]):
    """A dense matrix product, C[m, n] = A[m, k] @ B[k, n]."""

    name = "matmul"
    params_type = MatmulParams
    pallas_module = pallas_matmul

    def input_specs(self, params: MatmulParams) -> list[InputSpec]:
        dtype = params.dtype.value
        return [
            InputSpec("a", (params.m, params.k), dtype),
            InputSpec("b", (params.k, params.n), dtype),
        ]

    def function(self, params: MatmulParams) -> JaxFunction:
        precision = LAX_PRECISION[params.precision]

        def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
            return jnp.matmul(a, b, precision=precision)

        return matmul

    def pallas_function(self, params: MatmulParams, choice: KernelChoice) -> JaxFunction:
        shape = (params.m, params.n, params.k)
        precision = LAX_PRECISION[params.precision]
        return pallas_matmul.matmul_fn(shape, params.dtype.value, choice, precision)

    def reference(self, params: MatmulParams, inputs: Sequence[HostArray]) -> HostArray:
        return product_reference(inputs)

    def flop_count(self, params: MatmulParams) -> float:
        return product_flops(params.m, params.n, params.k)

    def byte_count(self, params: MatmulParams) -> float:
        return float(params.input_bytes())

    def tolerance(self, params: MatmulParams) -> float:
        return contraction_tolerance(params.dtype, params.precision, params.k)
