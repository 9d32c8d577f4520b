"""`elementwise`: a chain of `ops` elementwise operations over `n` elements."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, WorkloadParams
from workers.catalog.kernels import GpuBackend, backend_field, block_field
from workers.protocol import PathId


class ElementwiseKernel(StrEnum):
    """The implementation: a hand-written CUDA kernel on cuda, XLA's or Pallas's on JAX."""

    FUSED = "fused"
    UNFUSED = "unfused"
    XLA = "xla"
    PALLAS = "pallas"


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
        description="The implementation. JAX paths: xla (the default; any value but pallas "
        "reads as xla) or pallas (one Pallas kernel over rows of 128). cuda: fused (one "
        "kernel, the default) or unfused (one launch per operation).",
    )
    pallas_backend: Annotated[GpuBackend, Lax] = backend_field()
    block_rows: int = block_field("rows of 128 elements per block")

    def output_bytes(self) -> int:
        return self.n * DTYPE_BYTES[self.dtype.value]

    def input_bytes(self) -> int:
        # One input vector and one output vector: fusion keeps the intermediates on chip.
        return 2 * self.n * DTYPE_BYTES[self.dtype.value]
