"""`attention`: softmax(Q Kᵀ / √d) V over batch × heads, optionally causal."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, Precision, WorkloadParams
from workers.catalog.kernels import GpuBackend, backend_field, block_field
from workers.catalog.peak import F64, Peak
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
        """As workers.workloads.attention runs it: the scores in float32 while sampling;
        the float64 reference holds its scores and their softmax weights at once."""
        size = DTYPE_BYTES[self.dtype.value]
        qkv = self.batch * self.heads * self.seq_len * self.head_dim
        scores = self.batch * self.heads * self.seq_len * self.seq_len
        held = {"host and placed inputs": 2 * 3 * qkv * size}
        return Peak.largest(
            {
                "sampling": {
                    **held,
                    "scores (float32)": 4 * scores,
                    "outputs": calls_alive * qkv * size,
                },
                "the float64 reference": {
                    **held,
                    "output": qkv * size,
                    "float64 inputs": 3 * qkv * F64,
                    "float64 scores and weights": 2 * scores * F64,
                    "float64 reference": qkv * F64,
                },
                "the correctness check": {
                    **held,
                    "output": qkv * size,
                    "float64 reference, output and difference": 3 * qkv * F64,
                },
            }
        )
