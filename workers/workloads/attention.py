"""`attention` on JAX: softmax(Q Kᵀ / √d) V, written out as two contractions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.attention import AttentionParams
from workers.catalog.kernels import KernelChoice
from workers.pallas import ops as pallas_ops
from workers.workloads.base import (
    LAX_PRECISION,
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
)

_MASKED = -1e30
"""Score given to masked keys: finite, so a row never becomes NaN, and exp() of it is 0."""


def _attention64(q: HostArray, k: HostArray, v: HostArray, causal: bool) -> HostArray:
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        keep = np.tril(np.ones(scores.shape[-2:], dtype=bool))
        scores = np.where(keep, scores, _MASKED)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    result: HostArray = np.matmul(weights, v)
    return result


class Attention(Workload[AttentionParams]):
    """Scaled dot-product attention over [batch, heads, seq_len, head_dim] arrays.

    Scores and the softmax are kept in float32 whatever the storage type, and the
    weights are rounded to the storage type before the second contraction, as mixed-
    precision transformer code does.
    """

    name = "attention"
    params_type = AttentionParams
    pallas_module = pallas_ops

    def input_specs(self, params: AttentionParams) -> list[InputSpec]:
        shape = (params.batch, params.heads, params.seq_len, params.head_dim)
        return [InputSpec(name, shape, params.dtype.value) for name in ("q", "k", "v")]

    def function(self, params: AttentionParams) -> JaxFunction:
        precision = LAX_PRECISION[params.precision]
        scale = 1.0 / math.sqrt(params.head_dim)
        causal = params.causal

        def attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            scores = jnp.einsum(
                "bhqd,bhkd->bhqk", q, k, precision=precision, preferred_element_type=jnp.float32
            )
            scores = scores * scale
            if causal:
                length = q.shape[2]
                keep = jnp.tril(jnp.ones((length, length), dtype=bool))
                scores = jnp.where(keep, scores, _MASKED)
            weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
            out = jnp.einsum(
                "bhqk,bhkd->bhqd",
                weights,
                v,
                precision=precision,
                preferred_element_type=jnp.float32,
            )
            return out.astype(q.dtype)

        return attention

    def pallas_function(self, params: AttentionParams, choice: KernelChoice) -> JaxFunction:
        return pallas_ops.attention_fn(params.head_dim, params.causal, choice)

    def reference(self, params: AttentionParams, inputs: Sequence[HostArray]) -> HostArray:
        q, k, v = (as_float64(x) for x in inputs)
        return _attention64(q, k, v, params.causal)
