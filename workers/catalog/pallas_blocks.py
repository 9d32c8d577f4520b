"""Pallas block sizes: the defaults per compiler and the refusals, per workload. No jax.

The server imports this (through `workers.catalog.kernels`) to refuse a job before it is
queued; `workers.pallas` builds the kernels from the same figures. The limits the blocks
must fit, with their sources, are in `workers.catalog.pallas_limits`.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.catalog.pallas_limits import (
    CANDIDATES,
    GPU_CANDIDATES,
    GPU_SHARED,
    H100,
    ITEMSIZE,
    REGISTERS,
    TPU_FLOAT16,
    TPU_LIKE,
    TPU_VMEM,
    Backend,
    Gpu,
    default_block,
    divides,
    power_of_two,
    shared_limit,
    size,
)

# --- matmul ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatmulBlocks:
    """The tile of C one kernel instance computes (bm × bn) and its step along k (bk)."""

    bm: int
    bn: int
    bk: int


TRITON_STAGES = 3
"""Software-pipelining depth of the Triton matmul."""
MOSAIC_GPU_STAGES = 4
"""`max_concurrent_steps` given to jax's Mosaic GPU matmuls."""
MOSAIC_GPU_BK = 64
"""The k step of jax's Mosaic GPU matmuls: one 128-byte swizzled row of 16-bit values."""
TRITON_MAX_ACCUMULATOR = 128
"""Accumulator registers a thread may hold in the Triton matmul before the tile is refused."""


def triton_warps(blocks: MatmulBlocks) -> int:
    """Warps of the Triton matmul: 8 for a 128 × 128 tile or larger, else 4."""
    return 8 if blocks.bm * blocks.bn >= 128 * 128 else 4


def matmul_vmem_bytes(blocks: MatmulBlocks, itemsize: int) -> int:
    """VMEM a Mosaic matmul instance holds at least: A, B and C blocks double-buffered, and
    the float32 accumulator. libtpu may need more (its own scratch): it refuses past the
    limit itself, and the run turns that refusal into words too."""
    b = blocks
    return 2 * itemsize * (b.bm * b.bk + b.bk * b.bn + b.bm * b.bn) + 4 * b.bm * b.bn


def matmul_shared_bytes(blocks: MatmulBlocks, itemsize: int, backend: Backend, gpu: Gpu) -> int:
    """Shared memory of one GPU matmul block. Triton: the A and B tiles of each pipeline
    stage (XLA's own count: 'requested 393216' for 128 × 128 × 256 bf16). Mosaic GPU: the
    tiles of each stage (on sm_90 the B tile is two warpgroups wide), two 64-column
    epilogue tiles and barriers, matching Mosaic GPU's own count to the byte."""
    bm, bn, bk = blocks.bm, blocks.bn, blocks.bk
    if backend is not Backend.MOSAIC_GPU:
        return TRITON_STAGES * itemsize * (bm * bk + bk * bn)
    stages, epilogue = MOSAIC_GPU_STAGES, 2 * bm * 64 * itemsize
    if gpu.sm >= 100:
        return stages * itemsize * (bm * bk + bk * bn) + epilogue + 16 * stages + 1092
    return stages * itemsize * (bm * bk + bk * 2 * bn) + epilogue + 16 * stages


def default_matmul_blocks(
    m: int, n: int, k: int, backend: Backend, *, gpu: Gpu = H100, dtype: str = "bfloat16"
) -> MatmulBlocks:
    """TPU and interpret: each the largest of 512, 256, 128 dividing its dimension.
    Triton: the largest of 128, 64, 32; bk then the largest that keeps the pipeline's tiles
    in shared memory. Mosaic GPU: jax's own tiles, 128 rows, k by 64, and 256 columns on
    B200 (tcgen05, accumulator in tensor memory) or 128 per warpgroup on H100/H200."""
    if backend is Backend.TRITON:
        bm, bn = default_block(m, GPU_CANDIDATES), default_block(n, GPU_CANDIDATES)
        for bk in GPU_CANDIDATES:
            blocks = MatmulBlocks(bm, bn, bk)
            fits = matmul_shared_bytes(blocks, ITEMSIZE[dtype], backend, gpu) <= GPU_SHARED
            if k % bk == 0 and fits:
                return blocks
        return MatmulBlocks(bm, bn, default_block(k, GPU_CANDIDATES))
    if backend is Backend.MOSAIC_GPU:
        columns = (256, 128, 64) if gpu.sm >= 100 else (128, 64)
        return MatmulBlocks(default_block(m, (128,)), default_block(n, columns), MOSAIC_GPU_BK)
    return MatmulBlocks(default_block(m), default_block(n), default_block(k))


def check_matmul_blocks(
    m: int, n: int, k: int, *, dtype: str, blocks: MatmulBlocks, backend: Backend, gpu: Gpu = H100
) -> list[str]:
    """Why `blocks` cannot serve an (m × k) @ (k × n) product of `dtype` on `backend`."""
    itemsize = ITEMSIZE[dtype]
    out = [TPU_FLOAT16] if backend is Backend.MOSAIC_TPU and dtype == "float16" else []
    c = CANDIDATES if backend in TPU_LIKE else GPU_CANDIDATES
    out += divides("block_m", blocks.bm, "m", m, c) + divides("block_n", blocks.bn, "n", n, c)
    out += divides("block_k", blocks.bk, "k", k, c)
    if backend in TPU_LIKE:
        return out + _tpu_matmul(m, n, k, itemsize, blocks)
    if backend is Backend.MOSAIC_GPU and itemsize != 2:
        return [
            *out,
            "the Mosaic GPU matmul takes bfloat16 or float16: jax's Hopper and Blackwell "
            "kernels feed 16-bit tiles to the tensor cores; use pallas_backend=triton",
        ]
    for name, block in (("block_m", blocks.bm), ("block_n", blocks.bn), ("block_k", blocks.bk)):
        out += power_of_two(name, block, backend)
    limit = shared_limit(gpu)
    used = matmul_shared_bytes(blocks, itemsize, backend, gpu)
    if used > limit.bytes:
        stages = TRITON_STAGES if backend is Backend.TRITON else MOSAIC_GPU_STAGES
        out.append(
            f"blocks {blocks.bm}×{blocks.bk} and {blocks.bk}×{blocks.bn} over {stages} "
            f"pipeline stages need {size(used)} of shared memory, over the {limit.phrase()}"
        )
    if backend is Backend.TRITON:
        warps = triton_warps(blocks)
        per_thread = blocks.bm * blocks.bn // (32 * warps)
        if per_thread > TRITON_MAX_ACCUMULATOR:
            out.append(
                f"a {blocks.bm}×{blocks.bn} float32 accumulator is {per_thread} registers a "
                f"thread over {warps} warps, of the {REGISTERS} a thread can address on "
                "sm_90/sm_100: ptxas would spill (measured on H100: 256×256×32 bf16 uses all "
                "255 and spills 1556 bytes; 128×256 fits in 182)"
            )
        return out
    return out + _mosaic_gpu_matmul(n, blocks, gpu)


def _tpu_matmul(m: int, n: int, k: int, itemsize: int, blocks: MatmulBlocks) -> list[str]:
    out = []
    sub = 8 * 4 // itemsize  # a vector register's 8 sublanes of 32 bits: 8 rows f32, 16 bf16
    for name, block, dim, quantum in (
        ("block_m", blocks.bm, m, sub),
        ("block_k", blocks.bk, k, 128),
        ("block_n", blocks.bn, n, 128),
    ):
        if block != dim and block % quantum:
            out.append(
                f"{name}={block} is neither a multiple of {quantum} nor the whole dimension "
                f"({dim}): Mosaic tiles a block's last two dimensions by the TPU vector "
                f"register, {sub} × 128 values of {itemsize} bytes"
            )
    used = matmul_vmem_bytes(blocks, itemsize)
    if used > TPU_VMEM.bytes:
        out.append(
            f"blocks {blocks.bm}×{blocks.bk} and {blocks.bk}×{blocks.bn} need at least "
            f"{size(used)} of VMEM (inputs and output double-buffered, a float32 "
            f"accumulator), over the {TPU_VMEM.phrase()}"
        )
    return out


def _mosaic_gpu_matmul(n: int, blocks: MatmulBlocks, gpu: Gpu) -> list[str]:
    out = []
    if blocks.bk != MOSAIC_GPU_BK:
        out.append(
            f"block_k={blocks.bk}: jax's Mosaic GPU matmuls step k by one 128-byte swizzled "
            f"row, so block_k must be {MOSAIC_GPU_BK} for 16-bit values"
        )
    if blocks.bm != 128:
        out.append(
            f"block_m={blocks.bm}: jax's Mosaic GPU matmuls take 128 rows a tile "
            "(one warpgroup's MMA height)"
        )
    if blocks.bn not in (64, 128, 256):
        out.append(f"block_n={blocks.bn}: jax's Mosaic GPU matmuls take 64, 128 or 256")
    elif gpu.sm < 100 and n % (2 * blocks.bn):
        out.append(
            f"block_n={blocks.bn}: jax's Hopper matmul gives each of its two warpgroups "
            f"block_n columns, so n={n} must divide by {2 * blocks.bn}"
        )
    return out


# --- elementwise ----------------------------------------------------------------------------

LANES = 128
"""The elementwise kernel views the vector as rows of 128 (a TPU vector register's lanes)."""
TRITON_ROWS = (8, 4, 2, 1)
"""Triton keeps a block in the registers of 4 warps: 8 rows are 8 values a thread. Measured
on H100 (ops=8, float32): 8 rows 56 registers, 32 rows 188, 64 rows all 255 and 644 bytes
spilled; a 512-row block compiled for minutes."""
TRITON_MAX_ROWS = 32


def default_rows(n: int, backend: Backend) -> int:
    """Rows of 128 per block: the largest of 512, 256, 128 dividing n / 128 (Triton: of 8,
    4, 2, 1); 0 when n is no multiple of 128."""
    if n % LANES:
        return 0
    return default_block(n // LANES, TRITON_ROWS if backend is Backend.TRITON else CANDIDATES)


def check_elementwise_block(n: int, *, dtype: str, rows: int, backend: Backend) -> list[str]:
    """Why blocks of `rows` × 128 elements of `dtype` cannot be used."""
    itemsize = ITEMSIZE[dtype]
    if backend is Backend.MOSAIC_TPU and dtype == "float16":
        return [TPU_FLOAT16]
    if backend is Backend.MOSAIC_GPU:
        return [
            "elementwise has no Mosaic GPU kernel here: pallas_backend=mosaic-gpu takes "
            "matmul, sharded-matmul and (H100/H200, float16) attention; use "
            "pallas_backend=triton"
        ]
    if n % LANES:
        return [
            f"n={n} is not a multiple of {LANES}: the Pallas kernel views the vector as rows "
            f"of {LANES} elements (a TPU vector register's lanes)"
        ]
    total = n // LANES
    rows_from = CANDIDATES if backend in TPU_LIKE else TRITON_ROWS
    out = divides("block_rows", rows, "n / 128", total, rows_from)
    if backend in TPU_LIKE:
        sub = 8 * 4 // itemsize
        if rows != total and rows % sub:
            out.append(
                f"block_rows={rows} is neither a multiple of {sub} nor all {total} rows: "
                f"Mosaic tiles a block by whole vector registers ({sub} × 128 values)"
            )
        used = 4 * rows * LANES * itemsize  # input and output blocks, double-buffered
        if used > TPU_VMEM.bytes:
            out.append(
                f"block_rows={rows} needs {size(used)} of VMEM (input and output blocks, "
                f"double-buffered), over the {TPU_VMEM.phrase()}"
            )
    elif rows & (rows - 1):
        out.append(f"block_rows={rows} is not a power of two, as Triton blocks are")
    elif rows > TRITON_MAX_ROWS:
        out.append(
            f"block_rows={rows} is over {TRITON_MAX_ROWS} rows: Triton keeps a block in the "
            f"registers of 128 threads, {rows} values each, and ptxas spills past "
            f"{TRITON_MAX_ROWS} rows (measured on H100: 64 rows take all {REGISTERS} registers "
            "and spill 644 bytes)"
        )
    return out


# --- attention ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionBlocks:
    """Query rows and key rows one flash-attention step holds."""

    block_q: int
    block_k: int


def default_attention_blocks(seq_len: int, backend: Backend) -> AttentionBlocks:
    """The largest of 512, 256, 128 dividing the sequence on TPU (of 128, 64, 32 on the
    GPU, where the score tile lives in registers), for queries and keys alike."""
    found = default_block(seq_len, CANDIDATES if backend in TPU_LIKE else GPU_CANDIDATES)
    return AttentionBlocks(found, found)


def check_attention_blocks(
    seq_len: int,
    head_dim: int,
    *,
    dtype: str,
    blocks: AttentionBlocks,
    backend: Backend,
    gpu: Gpu = H100,
) -> list[str]:
    """Why `blocks` cannot serve attention over `seq_len` tokens of `head_dim` features."""
    itemsize = ITEMSIZE[dtype]
    out = [TPU_FLOAT16] if backend is Backend.MOSAIC_TPU and dtype == "float16" else []
    c = CANDIDATES if backend in TPU_LIKE else GPU_CANDIDATES
    out += divides("block_q", blocks.block_q, "seq_len", seq_len, c)
    out += divides("block_k", blocks.block_k, "seq_len", seq_len, c)
    if backend in TPU_LIKE:
        for name, block in (("block_q", blocks.block_q), ("block_k", blocks.block_k)):
            if block != seq_len and block % 128:
                out.append(
                    f"{name}={block} is neither a multiple of 128 nor the whole sequence "
                    f"({seq_len}): jax's TPU flash attention lays key blocks on the 128 "
                    "lanes of a vector register"
                )
        bq, bk = blocks.block_q, blocks.block_k
        io = 2 * itemsize * head_dim * (2 * bq + 2 * bk)
        used = io + 4 * bq * (2 * 128 + head_dim) + 4 * bq * bk  # + running max, sum, scores
        if used > TPU_VMEM.bytes:
            out.append(
                f"blocks of {bq} queries and {bk} keys need {size(used)} of VMEM, over the "
                f"{TPU_VMEM.phrase()}"
            )
        return out
    out += power_of_two("block_q", blocks.block_q, backend)
    out += power_of_two("block_k", blocks.block_k, backend)
    if backend is Backend.MOSAIC_GPU:
        if gpu.sm >= 100:
            out.append(
                f"attention on Mosaic GPU is jax's Hopper kernel (wgmma), which the "
                f"{gpu.name} (sm_100a) lacks ('nvvm.wgmma.fence.aligned' op is not "
                "supported on sm_100a): use pallas_backend=triton there"
            )
        if dtype != "float16":
            out.append(
                "the Mosaic GPU attention takes float16 only: jax's attention_mgpu rounds "
                "the softmax weights to float16 for its second wgmma, which refuses mixed "
                "inputs; use pallas_backend=triton"
            )
        if blocks.block_q % 64 or blocks.block_k % 64 or head_dim % 64:
            out.append(
                "jax's Mosaic GPU attention takes block_q, block_k and head_dim in multiples of 64"
            )
    limit = shared_limit(gpu)
    # The query block and two stages of key and value blocks in shared memory.
    used = itemsize * head_dim * (blocks.block_q + 2 * 2 * blocks.block_k)
    if used > limit.bytes:
        out.append(
            f"blocks of {blocks.block_q} queries and {blocks.block_k} keys need {size(used)} "
            f"of shared memory, over the {limit.phrase()}"
        )
    return out
