"""`matmul` on JAX: C = A @ B at the requested contraction precision."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.kernels import KernelChoice
from workers.catalog.matmul import MatmulParams
from workers.catalog.product_check import projected
from workers.measure.correctness import check_output
from workers.measure.projected import ProjectedProduct
from workers.pallas import matmul as pallas_matmul
from workers.workloads.base import (
    LAX_PRECISION,
    Check,
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
)


def product_reference(inputs: Sequence[HostArray]) -> HostArray:
    """A @ B in float64: the reference of every dense product, however it is laid out."""
    a, b = inputs
    result: HostArray = np.matmul(as_float64(a), as_float64(b))
    return result


def product_checker(inputs: Sequence[HostArray], tolerance: float) -> Check:
    """What judges an output of A @ B (workers.catalog.product_check): against the whole
    float64 product while its copies are small, else by random projections of it, with
    no float64 copy of A, B or C."""
    a, b = inputs
    if not projected(a.shape[0], b.shape[1], a.shape[1]):
        reference = product_reference(inputs)
        return lambda output: check_output(output, reference, tolerance)
    product = ProjectedProduct(a, b)
    return lambda output: product.check(output, tolerance)


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

    def checker(
        self,
        params: MatmulParams,
        inputs: Sequence[HostArray],
        arithmetic: Arithmetic | None = None,
    ) -> Check:
        return product_checker(inputs, self.tolerance(params, arithmetic))
