"""`attention`: softmax(Q Kᵀ / √d) V over batch × heads, optionally causal."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, Precision, WorkloadParams
from workers.catalog.peak import F64, Peak


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

    def output_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        return size * self.batch * self.heads * self.seq_len * self.head_dim

    def input_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        qkvo = 4 * self.batch * self.heads * self.seq_len * self.head_dim
        # The score matrix is materialized by this plain formulation, so it counts too.
        scores = self.batch * self.heads * self.seq_len * self.seq_len
        return size * (qkvo + scores)

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
