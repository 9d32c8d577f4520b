"""`elementwise` on JAX: a chain of bounded elementwise operations that XLA fuses."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.elementwise import CHAIN_OPS, ElementwiseParams
from workers.catalog.kernels import KernelChoice
from workers.pallas import ops as pallas_ops
from workers.workloads.base import HostArray, InputSpec, JaxFunction, Workload, as_float64


def apply_chain(x: Any, ops: int, lib: Any) -> Any:
    """Apply the first `ops` operations of the repeating chain, with `lib` = jnp or np."""
    steps: dict[str, Callable[[Any], Any]] = {
        "sin": lib.sin,
        "affine": lambda v: v * 0.75 + 0.125,
        "tanh": lib.tanh,
        "cos": lib.cos,
    }
    for i in range(ops):
        x = steps[CHAIN_OPS[i % len(CHAIN_OPS)]](x)
    return x


class Elementwise(Workload[ElementwiseParams]):
    """A vector pushed through `ops` elementwise operations: one fused kernel, not `ops`."""

    name = "elementwise"
    params_type = ElementwiseParams
    pallas_module = pallas_ops

    def input_specs(self, params: ElementwiseParams) -> list[InputSpec]:
        return [InputSpec("x", (params.n,), params.dtype.value)]

    def function(self, params: ElementwiseParams) -> JaxFunction:
        ops = params.ops

        def chain(x: jax.Array) -> jax.Array:
            result: jax.Array = apply_chain(x, ops, jnp)
            return result

        return chain

    def pallas_function(self, params: ElementwiseParams, choice: KernelChoice) -> JaxFunction:
        chain = functools.partial(apply_chain, ops=params.ops, lib=jnp)
        return pallas_ops.elementwise_fn(params.n, params.dtype.value, chain, choice)

    def reference(self, params: ElementwiseParams, inputs: Sequence[HostArray]) -> HostArray:
        result: HostArray = np.asarray(apply_chain(as_float64(inputs[0]), params.ops, np))
        return result
