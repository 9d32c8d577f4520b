"""`attention`: softmax(Q Kᵀ / √d) V over batch × heads, optionally causal."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, Precision, WorkloadParams
from workers.catalog.kernels import GpuBackend, backend_field, block_field
from workers.catalog.peak import F64, Peak, float64_rows
from workers.catalog.tolerances import contraction_tolerance


class AttentionKernel(StrEnum):
    """The implementation: XLA's own kernels, or jax's shipped Pallas flash attention."""

    XLA = "xla"
    PALLAS = "pallas"


class AttentionParams(WorkloadParams):
    workload = "attention"
    title = "Attention"
    summary = (
        "Two contractions around a softmax, as in a transformer layer: the score matrix grows "
        "with the square of the sequence length."
    )

    batch: int = Field(default=2, ge=1, le=256, description="Independent sequences.")
    heads: int = Field(default=4, ge=1, le=128, description="Attention heads per sequence.")
    seq_len: int = Field(default=256, ge=1, le=32768, description="Tokens per sequence.")
    head_dim: int = Field(default=64, ge=1, le=512, description="Features per head.")
    causal: bool = Field(default=False, description="Mask out keys after each query.")
    dtype: Annotated[Dtype, Lax] = Field(default=Dtype.FLOAT32, description="Storage type.")
    precision: Annotated[Precision, Lax] = Field(
        default=Precision.DEFAULT, description="Contraction precision (jax.lax.Precision)."
    )
    kernel: Annotated[AttentionKernel, Lax] = Field(
        default=AttentionKernel.XLA,
        description="The implementation: xla (XLA's own kernels, the default) or pallas "
        "(jax's shipped flash-attention kernels: ops.tpu.flash_attention on TPU and in "
        "interpret mode, ops.gpu.attention.mha on Triton, ops.gpu.attention_mgpu on Mosaic GPU).",
    )
    pallas_backend: Annotated[GpuBackend, Lax] = backend_field()
    block_q: int = block_field("queries per block")
    block_k: int = block_field("keys per block")

    def output_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        return size * self.batch * self.heads * self.seq_len * self.head_dim

    def input_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        qkvo = 4 * self.batch * self.heads * self.seq_len * self.head_dim
        # The score matrix is materialized by this plain formulation, so it counts too.
        scores = self.batch * self.heads * self.seq_len * self.seq_len
        return size * (qkvo + scores)

    def flop_count(self) -> float:
        # Two contractions of 2·S·S·D each, plus about five per score for scale and
        # softmax. Masking skips no work in this formulation, so causal costs the same.
        bh = self.batch * self.heads
        s, d = self.seq_len, self.head_dim
        return float(bh * (4 * s * s * d + 5 * s * s))

    def byte_count(self) -> float:
        # Q, K, V read once and the output written once: the least any implementation moves.
        size = DTYPE_BYTES[self.dtype.value]
        return float(4 * self.batch * self.heads * self.seq_len * self.head_dim * size)

    def tolerance(self) -> float:
        return self.tolerance_at(None)

    def contraction_precision(self) -> Precision:
        return self.precision

    def tolerance_at(self, arithmetic: Arithmetic | None) -> float:
        # The longer of the two contractions sets the float32 error growth.
        length = max(self.seq_len, self.head_dim)
        return 1.5 * contraction_tolerance(self.dtype, self.precision, length, arithmetic)

    def peak(self, calls_alive: int = 1) -> Peak:
        """As workers.workloads.attention runs it: while sampling, the scores in float32
        and the softmax weights in the storage type (causal: the mask too; measured on
        jax-cpu, where XLA keeps each whole, bench/peak_model.py: 0.93 to 1.05 of the
        measured peak for 1 to 32 heads of 1024 to 4096 tokens);
        the check, a block of one head's queries at a time (every head's at once when they
        fit one block), holds that block's float64 scores and weights (and a causal mask),
        the float64 keys and values, and the block's queries, output, reference and
        error."""
        size = DTYPE_BYTES[self.dtype.value]
        length, width = self.seq_len, self.head_dim
        qkv = self.batch * self.heads * length * width
        scores = self.batch * self.heads * length * length
        rows = self.batch * self.heads * length
        whole = float64_rows(rows, length) == rows
        block = rows if whole else float64_rows(length, length)
        keys = 2 * (qkv if whole else length * width)
        head = F64 * (keys + 4 * block * width)
        held = {"host and placed inputs": 2 * 3 * qkv * size}
        masking = {}
        if self.causal:  # as measured: a float32 program also keeps the masked scores
            masking = {"causal mask": scores + (4 * scores if size == 4 else 0)}
        return Peak.largest(
            {
                "sampling": {
                    **held,
                    "scores (float32) and softmax weights": (4 + size) * scores,
                    **masking,
                    "outputs": calls_alive * qkv * size,
                },
                "the correctness check": {
                    **held,
                    "output": qkv * size,
                    "float64 scores and weights of a block": 2 * block * length * F64,
                    **({"its causal mask": block * length} if self.causal else {}),
                    "float64 keys and values, a block's queries and results": head,
                },
            }
        )
