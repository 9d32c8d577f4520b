"""C = A @ B as a Pallas kernel: one tile of C per kernel instance, summed in float32.

- Mosaic TPU (and interpret mode, which runs the same body on the CPU): the grid walks
  (m / block_m, n / block_n, k / block_k); the accumulator is a VMEM scratch buffer and k
  is the sequential ("arbitrary") grid axis. Lowers to the custom call `tpu_custom_call`.
- Triton: the grid walks (m / block_m, n / block_n); each instance loops over k with the
  sum in registers. Lowers to `__gpu$xla.gpu.triton`; XLA compiles it inside `.compile()`.
- Mosaic GPU: jax's bundled matmuls, `blackwell_matmul_mgpu` on sm_100 (tcgen05 MMAs, the
  accumulator in tensor memory) and `hopper_matmul_mgpu` on sm_90 (wgmma). Lowers to
  `mosaic_gpu_v2`.
- Sharded: the same kernel on each device's shards inside `jax.shard_map`, with the
  collectives the layout needs written out (`workers.catalog.kernels.matmul_layout`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from workers.catalog.kernels import KernelChoice, matmul_layout
from workers.catalog.pallas_blocks import (
    MOSAIC_GPU_STAGES,
    TRITON_STAGES,
    MatmulBlocks,
    triton_warps,
)
from workers.catalog.pallas_limits import H100, Backend, Gpu
from workers.compiler.jaxtyped import shape_dtype_struct
from workers.scale.mesh import partition_spec

Matmul = Callable[[jax.Array, jax.Array], jax.Array]
_psum = cast("Callable[..., jax.Array]", jax.lax.psum)
_psum_scatter = cast("Callable[..., jax.Array]", jax.lax.psum_scatter)


def _tpu_kernel(a_ref: Any, b_ref: Any, o_ref: Any, acc_ref: Any, *, precision: Any) -> None:
    """One (block_m × block_n) tile of C, one block_k step of its sum: grid axis 2 walks k."""
    from jax.experimental import pallas as pl

    @pl.when(pl.program_id(2) == 0)
    def _start() -> None:
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(
        a_ref[...], b_ref[...], preferred_element_type=jnp.float32, precision=precision
    )

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _finish() -> None:
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _triton_kernel(
    a_ref: Any, b_ref: Any, o_ref: Any, *, bk: int, steps: int, precision: Any
) -> None:
    """One (block_m × block_n) tile of C: a loop over k in steps of block_k, the sum in
    float32 registers."""
    from jax.experimental import pallas as pl

    def step(i: Any, acc: Any) -> Any:
        window = pl.ds(pl.multiple_of(i * bk, bk), bk)
        return acc + jnp.dot(
            a_ref[:, window],
            b_ref[window, :],
            preferred_element_type=jnp.float32,
            precision=precision,
        )

    acc = jax.lax.fori_loop(0, steps, step, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def tpu_matmul(
    shape: tuple[int, int, int], dtype: Any, b: MatmulBlocks, precision: Any, interpret: bool
) -> Matmul:
    """The Mosaic TPU matmul kernel (unchecked: the catalog checked the blocks)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    m, n, k = shape
    call = pl.pallas_call(
        # A product of two 16-bit values is exact in float32: precision matters for float32
        # inputs only, and Mosaic refuses it for bfloat16 ones ("Bad lhs type").
        functools.partial(_tpu_kernel, precision=precision if dtype == jnp.float32 else None),
        out_shape=shape_dtype_struct((m, n), dtype),
        grid=(m // b.bm, n // b.bn, k // b.bk),
        in_specs=[
            pl.BlockSpec((b.bm, b.bk), lambda i, j, s: (i, s)),
            pl.BlockSpec((b.bk, b.bn), lambda i, j, s: (s, j)),
        ],
        out_specs=pl.BlockSpec((b.bm, b.bn), lambda i, j, s: (i, j)),
        scratch_shapes=[pltpu.VMEM((b.bm, b.bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=interpret,
        name="boundary_matmul",
    )
    return cast(Matmul, call)


def triton_matmul(
    shape: tuple[int, int, int], dtype: Any, b: MatmulBlocks, precision: Any
) -> Matmul:
    """The Triton matmul kernel (unchecked)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    m, n, k = shape
    call = pl.pallas_call(
        functools.partial(_triton_kernel, bk=b.bk, steps=k // b.bk, precision=precision),
        out_shape=shape_dtype_struct((m, n), dtype),
        grid=(m // b.bm, n // b.bn),
        in_specs=[
            pl.BlockSpec((b.bm, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, b.bn), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((b.bm, b.bn), lambda i, j: (i, j)),
        compiler_params=pltriton.CompilerParams(
            num_warps=triton_warps(b), num_stages=TRITON_STAGES
        ),
        name="boundary_matmul",
    )
    return cast(Matmul, call)


def mosaic_gpu_matmul(b: MatmulBlocks, gpu: Gpu) -> Matmul:
    """jax's bundled Mosaic GPU matmul for `gpu` (unchecked). Both read the SM count from
    the abstract mesh: lower inside `workers.pallas.lowering.lowering_for`."""
    if gpu.sm >= 100:
        from jax.experimental.pallas.ops.gpu import blackwell_matmul_mgpu as bw

        config = bw.TuningConfig(
            tile_m=b.bm,
            tile_n=b.bn,
            tile_k=b.bk,
            max_concurrent_steps=MOSAIC_GPU_STAGES,
            collective=False,
        )
        return cast(Matmul, functools.partial(bw.matmul_kernel, config=config))
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hp

    hopper = hp.TuningConfig(
        tile_m=b.bm, tile_n=b.bn, tile_k=b.bk, max_concurrent_steps=MOSAIC_GPU_STAGES
    )

    def matmul(a: jax.Array, w: jax.Array) -> jax.Array:
        return cast(jax.Array, hp.matmul(a, w, None, hopper))

    return matmul


def matmul_fn(
    shape: tuple[int, int, int], dtype: str, choice: KernelChoice, precision: Any = None
) -> Matmul:
    """C = A @ B for (m, n, k) `shape` through the Pallas kernel `choice` names."""
    blocks = MatmulBlocks(choice.block("block_m"), choice.block("block_n"), choice.block("block_k"))
    item = jnp.dtype(dtype)
    if choice.backend is Backend.TRITON:
        return triton_matmul(shape, item, blocks, precision)
    if choice.backend is Backend.MOSAIC_GPU:
        return mosaic_gpu_matmul(blocks, choice.gpu or H100)
    return tpu_matmul(shape, item, blocks, precision, choice.interpret)


def sharded_matmul_fn(
    mesh: Mesh,
    specs: Any,
    shape: tuple[int, int, int],
    dtype: str,
    choice: KernelChoice,
    *,
    precision: Any = None,
) -> Matmul:
    """The matmul kernel on each device's shards inside `jax.shard_map`, with the
    collectives the layout needs written out (inside shard_map XLA adds none):

    - k sharded alike in A and B: each device holds partial sums, added across k's axes
      with `psum` (`psum_scatter` when C wants its rows over exactly those axes);
    - A's rows and B's columns over the same axes: B's columns are all-gathered first;
    - C replicated where the product came out sharded: all-gathered.
    """
    layout, why = matmul_layout(specs)
    if layout is None:
        raise ValueError(why)
    m, n, k = shape
    sizes = dict(mesh.shape)

    def shards(axes: tuple[str, ...]) -> int:
        out = 1
        for axis in axes:
            out *= sizes[axis]
        return out

    local = matmul_fn(
        (m // shards(layout.m_axes), n // shards(layout.n_axes), k // shards(layout.k_axes)),
        dtype,
        choice,
        precision,
    )
    _, b_spec, _ = specs
    want_m, want_n = specs[2][0], specs[2][1]

    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        if layout.gather_b:
            b = jax.lax.all_gather(b, b_spec[1], axis=1, tiled=True)
        c = local(a, b)
        if layout.scatter:
            c = _psum_scatter(c, layout.k_axes, scatter_dimension=0, tiled=True)
        elif layout.k_axes:
            c = _psum(c, layout.k_axes)
        if layout.m_axes and not want_m:
            c = jax.lax.all_gather(c, layout.m_axes, axis=0, tiled=True)
        if layout.n_axes and not want_n:
            c = jax.lax.all_gather(c, layout.n_axes, axis=1, tiled=True)
        return c

    out_spec = partition_spec((layout.out_m, layout.out_n))
    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(partition_spec(specs[0]), partition_spec(specs[1])),
        out_specs=out_spec,
        check_vma=False,
    )
    return cast(Matmul, mapped)
