"""`shape-sweep` on JAX: the one function every size goes through, its inputs, its float64
reference and its work counts. The sweep's loop lives in `workers.run.sweep`.

Unlike the other workloads this is not a `Workload`: it has no single input shape. Each
call takes x[rows, features]; under bucketing, rows are padded with zeros to the bucket's
size and the padded rows of the output are dropped after the call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.base import Precision
from workers.catalog.shape_sweep import CHAIN_LENGTH, ShapeSweepParams, SweepOp
from workers.workloads.base import (
    LAX_PRECISION,
    HostArray,
    InputSpec,
    JaxFunction,
    as_float64,
    random_normal,
)
from workers.workloads.elementwise import apply_chain


def function(params: ShapeSweepParams) -> JaxFunction:
    """A fresh function object each time: policies must never share JAX's caches."""
    if params.op is SweepOp.MATMUL:
        precision = LAX_PRECISION[Precision.DEFAULT]

        def project(x: jax.Array, w: jax.Array) -> jax.Array:
            return jnp.matmul(x, w, precision=precision)

        return project

    def chain(x: jax.Array) -> jax.Array:
        result: jax.Array = apply_chain(x, CHAIN_LENGTH, jnp)
        return result

    return chain


def weight(params: ShapeSweepParams, rng: np.random.Generator) -> HostArray | None:
    """The fixed right-hand matrix of the matmul op (None for the elementwise op)."""
    if params.op is not SweepOp.MATMUL:
        return None
    spec = InputSpec("w", (params.features, params.out_features), params.dtype.value)
    return random_normal(spec, rng)


def make_input(params: ShapeSweepParams, rows: int, rng: np.random.Generator) -> HostArray:
    """x[rows, features]: standard normal values in the storage type."""
    return random_normal(InputSpec("x", (rows, params.features), params.dtype.value), rng)


def pad_rows(x: HostArray, rows: int) -> HostArray:
    """`x` with zero rows appended up to `rows` (itself when already that tall)."""
    extra = rows - x.shape[0]
    if extra <= 0:
        return x
    padded: HostArray = np.pad(x, ((0, extra), (0, 0)))
    return padded


def reference(params: ShapeSweepParams, x: HostArray, w: HostArray | None) -> HostArray:
    """The expected output for the unpadded `x`, in float64."""
    if params.op is SweepOp.MATMUL:
        assert w is not None
        product: HostArray = np.matmul(as_float64(x), as_float64(w))
        return product
    result: HostArray = np.asarray(apply_chain(as_float64(x), CHAIN_LENGTH, np))
    return result


def flop_count(params: ShapeSweepParams, rows: int) -> float:
    """FLOPs of one call at `rows` rows (`ShapeSweepParams.flop_count_at`)."""
    return params.flop_count_at(rows)


def byte_count(params: ShapeSweepParams, rows: int) -> float:
    """Bytes one call at `rows` rows must at least move (`ShapeSweepParams.byte_count_at`)."""
    return params.byte_count_at(rows)


def tolerance(params: ShapeSweepParams) -> float:
    """The relative error allowed (`ShapeSweepParams.tolerance`)."""
    return params.tolerance()
