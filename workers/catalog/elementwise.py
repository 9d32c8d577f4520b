"""`elementwise`: a chain of `ops` elementwise operations over `n` elements."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, WorkloadParams
from workers.catalog.kernels import GpuBackend, backend_field, block_field
from workers.protocol import PathId

CHAIN_OPS: tuple[str, ...] = ("sin", "affine", "tanh", "cos")
"""The operations applied in turn. Each maps into [-1, 1] or shrinks distances (|f'| ≤ 1),
so rounding errors never grow along the chain and values never overflow."""

# Per-operation error allowed, by storage type: a few ulps for float32 (accelerators use
# approximate sin/tanh), one rounding of the narrow types otherwise.
_PER_OP_ERROR: dict[str, float] = {"float32": 1e-6, "bfloat16": 2.0**-8, "float16": 2.0**-11}


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

    def flop_count(self) -> float:
        # Counted as one operation per element per step (the affine step's multiply-add
        # counts two); transcendental functions count one, as XLA's cost model does.
        per_element = sum(
            2 if CHAIN_OPS[i % len(CHAIN_OPS)] == "affine" else 1 for i in range(self.ops)
        )
        return float(per_element * self.n)

    def byte_count(self) -> float:
        return float(self.input_bytes())

    def tolerance(self) -> float:
        # Independent roundings of random sign add up like √ops; the factor 2 is margin.
        return 2 * _PER_OP_ERROR[self.dtype.value] * (1 + math.sqrt(self.ops))
