"""The elementwise chain and attention as Pallas kernels.

- Elementwise (ours): the vector viewed as rows of 128 (a TPU vector register's lanes),
  one kernel instance per block of rows, the whole chain applied in float32 before one
  store: on Mosaic TPU, Triton (4 warps) and in interpret mode.
- Attention: jax's shipped flash-attention kernels, not one of ours:
  `jax.experimental.pallas.ops.tpu.flash_attention` on TPU and in interpret mode (under
  `force_tpu_interpret_mode`, since it takes no interpret flag), `ops.gpu.attention.mha`
  on Triton and `ops.gpu.attention_mgpu.attention` on Mosaic GPU (H100/H200, float16).
  The GPU kernels take [batch, seq, heads, dim]: the workload's [batch, heads, seq, dim]
  arrays are transposed around them (XLA adds two transpose fusions).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp

from workers.catalog.kernels import KernelChoice
from workers.catalog.pallas_blocks import LANES
from workers.catalog.pallas_limits import TPU_LIKE, Backend
from workers.compiler.jaxtyped import shape_dtype_struct

Chain = Callable[[Any], Any]
Attention = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
_SWAP = (0, 2, 1, 3)
"""[batch, heads, seq, dim] ↔ [batch, seq, heads, dim]."""


def _elementwise_kernel(x_ref: Any, o_ref: Any, *, chain: Chain) -> None:
    x = x_ref[...].astype(jnp.float32)  # computed in float32 whatever the storage type
    o_ref[...] = chain(x).astype(o_ref.dtype)


def elementwise_fn(
    n: int, dtype: str, chain: Chain, choice: KernelChoice
) -> Callable[[jax.Array], jax.Array]:
    """`chain` over a vector of `n` as one Pallas kernel over (n / 128, 128), in blocks of
    `block_rows` rows."""
    from jax.experimental import pallas as pl

    rows, total = choice.block("block_rows"), n // LANES
    params: Any
    if choice.backend is Backend.TRITON:
        from jax.experimental.pallas import triton as pltriton

        params = pltriton.CompilerParams(num_warps=4, num_stages=1)
    else:
        from jax.experimental.pallas import tpu as pltpu

        params = pltpu.CompilerParams(dimension_semantics=("parallel",))
    call = pl.pallas_call(
        functools.partial(_elementwise_kernel, chain=chain),
        out_shape=shape_dtype_struct((total, LANES), jnp.dtype(dtype)),
        grid=(total // rows,),
        in_specs=[pl.BlockSpec((rows, LANES), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, LANES), lambda i: (i, 0)),
        compiler_params=params,
        interpret=choice.interpret,
        name="boundary_elementwise",
    )

    def elementwise(x: jax.Array) -> jax.Array:
        return cast(jax.Array, call(x.reshape(total, LANES)).reshape(n))

    return elementwise


def attention_fn(head_dim: int, causal: bool, choice: KernelChoice) -> Attention:
    """softmax(Q Kᵀ / √d) V over [batch, heads, seq_len, head_dim] through jax's shipped
    flash-attention kernel for `choice`'s compiler."""
    scale = 1.0 / math.sqrt(head_dim)
    block_q, block_k = choice.block("block_q"), choice.block("block_k")
    if choice.backend in TPU_LIKE:
        return _tpu_attention(block_q, block_k, causal, scale, interpret=choice.interpret)
    if choice.backend is Backend.TRITON:
        from jax.experimental.pallas.ops.gpu import attention as gpu_fa

        sizes = gpu_fa.BlockSizes(block_q=block_q, block_k=block_k)

        def triton_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            out = gpu_fa.mha(
                q.transpose(_SWAP),
                k.transpose(_SWAP),
                v.transpose(_SWAP),
                None,
                sm_scale=scale,
                causal=causal,
                block_sizes=sizes,
            )
            return cast(jax.Array, out.transpose(_SWAP))

        return triton_attention
    from jax.experimental.pallas.ops.gpu import attention_mgpu as mgpu_fa

    config = mgpu_fa.TuningConfig(
        block_q=block_q, block_kv=block_k, max_concurrent_steps=2, causal=causal
    )

    def mosaic_gpu_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        # jax's Mosaic GPU attention applies no 1/√d of its own: scale the queries first.
        scaled = (q * jnp.asarray(scale, q.dtype)).transpose(_SWAP)
        out = mgpu_fa.attention(scaled, k.transpose(_SWAP), v.transpose(_SWAP), config)
        return cast(jax.Array, out.transpose(_SWAP))

    return mosaic_gpu_attention


def _tpu_attention(
    block_q: int, block_k: int, causal: bool, scale: float, *, interpret: bool
) -> Attention:
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu import flash_attention as tpu_fa

    sizes = tpu_fa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1)
    run = functools.partial(
        tpu_fa.flash_attention, causal=causal, sm_scale=scale, block_sizes=sizes
    )

    def tpu_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        if interpret:  # the shipped kernel takes no interpret flag: force it from outside
            with pltpu.force_tpu_interpret_mode():
                return cast(jax.Array, run(q, k, v))
        return cast(jax.Array, run(q, k, v))

    return tpu_attention
