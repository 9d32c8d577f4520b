"""`elementwise`: a chain of `ops` elementwise operations over `n` elements."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, WorkloadParams
from workers.protocol import PathId


class ElementwiseKernel(StrEnum):
    """The hand-written CUDA kernel the cuda path runs (JAX paths let XLA choose)."""

    FUSED = "fused"
    UNFUSED = "unfused"


class ElementwiseParams(WorkloadParams):
    workload = "elementwise"
    title = "Elementwise chain"
    summary = (
        "A chain of cheap elementwise operations: XLA fuses it into one kernel, not one per "
        "operation, so the time is memory traffic, not arithmetic."
    )
    paths = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU, PathId.CUDA)

    n: int = Field(default=1 << 18, ge=1, le=1 << 28, description="Elements in the vector.")
    ops: int = Field(default=8, ge=1, le=64, description="Elementwise operations in the chain.")
    dtype: Annotated[Dtype, Lax] = Field(default=Dtype.FLOAT32, description="Storage type.")
    kernel: Annotated[ElementwiseKernel, Lax] = Field(
        default=ElementwiseKernel.FUSED,
        description="cuda path only: fused (one kernel) or unfused (one launch per operation).",
    )

    def output_bytes(self) -> int:
        return self.n * DTYPE_BYTES[self.dtype.value]

    def input_bytes(self) -> int:
        # One input vector and one output vector: fusion keeps the intermediates on chip.
        return 2 * self.n * DTYPE_BYTES[self.dtype.value]
