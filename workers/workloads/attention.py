"""`attention` on JAX: softmax(Q Kᵀ / √d) V, written out as two contractions.

Its check is exact and, past one block, blocked: each query's softmax is its own, so the
float64 reference is computed a block of queries of one head at a time (float64 scores and
weights of at most workers.catalog.peak.BLOCK_BYTES each), and the relative error is
summed over the blocks.
A whole float64 reference held the float64 scores of every head at once: 34 GB for batch
8, 16 heads and 4096 tokens."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.attention import AttentionParams
from workers.catalog.kernels import KernelChoice
from workers.catalog.peak import float64_rows
from workers.measure import faults
from workers.measure.correctness import error_verdict, non_finite_verdict, shape_verdict
from workers.pallas import ops as pallas_ops
from workers.protocol import Correctness
from workers.workloads.base import (
    LAX_PRECISION,
    Check,
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
)

_MASKED = -1e30
"""Score given to masked keys: finite, so a row never becomes NaN, and exp() of it is 0."""


def _attention64(
    q: HostArray, k: HostArray, v: HostArray, causal: bool, first: int = 0
) -> HostArray:
    """The float64 attention of queries `q` (the `first`-th query on) over keys `k` and
    values `v`. The scores become the softmax weights in place: one array of them."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    scores /= math.sqrt(q.shape[-1])
    if causal:
        queries = first + np.arange(scores.shape[-2])[:, None]
        scores[..., np.arange(scores.shape[-1])[None, :] > queries] = _MASKED
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    result: HostArray = np.matmul(scores, v)
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

    def checker(
        self,
        params: AttentionParams,
        inputs: Sequence[HostArray],
        arithmetic: Arithmetic | None = None,
    ) -> Check:
        # Every head's scores in one float64 block: the whole reference, at once.
        rows = params.batch * params.heads * params.seq_len
        if float64_rows(rows, params.seq_len) == rows:
            return super().checker(params, inputs, arithmetic)
        tolerance, causal = self.tolerance(params, arithmetic), params.causal
        return lambda output: blocked_check(inputs, output, causal, tolerance)


def blocked_check(
    inputs: Sequence[HostArray], output: HostArray, causal: bool, tolerance: float
) -> Correctness:
    """`output` judged against the float64 reference, a block of one head's queries at a
    time: ‖out − ref‖ / ‖ref‖ over the whole output, as `check_output` judges it."""
    q, k, v = inputs
    out = faults.as_judged(np.asarray(output))
    if out.shape != q.shape:
        return shape_verdict(out.shape, q.shape, tolerance)
    *heads, length, _ = q.shape
    step = float64_rows(length, length)
    difference = scale = 0.0
    bad = 0
    for head in np.ndindex(*heads):
        keys, values = as_float64(k[head]), as_float64(v[head])
        for first in range(0, length, step):
            got = as_float64(out[head][first : first + step])
            bad += int(got.size - np.count_nonzero(np.isfinite(got)))
            queries = as_float64(q[head][first : first + step])
            ref = _attention64(queries, keys, values, causal, first)
            difference += float(np.sum((got - ref) ** 2))
            scale += float(np.sum(ref**2))
    if bad:
        return non_finite_verdict(bad, tolerance)
    error = math.sqrt(difference) / math.sqrt(scale) if scale > 0 else math.sqrt(difference)
    return error_verdict(error, tolerance)
