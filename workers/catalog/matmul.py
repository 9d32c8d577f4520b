"""`matmul`: C[m, n] = A[m, k] @ B[k, n]."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, Precision, WorkloadParams
from workers.catalog.kernels import MatmulBlockFields
from workers.catalog.peak import Peak
from workers.catalog.product_check import product_peak
from workers.catalog.tolerances import contraction_tolerance
from workers.protocol import PathId


class MatmulKernel(StrEnum):
    """The implementation: a hand-written CUDA kernel on cuda, XLA's or Pallas's on JAX."""

    TILED = "tiled"
    NAIVE = "naive"
    XLA = "xla"
    PALLAS = "pallas"


def product_flops(m: int, n: int, k: int) -> float:
    """FLOPs of an (m × k) @ (k × n) product: one multiply and one add per term of every
    output element."""
    return 2.0 * m * n * k


class MatmulParams(WorkloadParams, MatmulBlockFields):
    workload = "matmul"
    title = "Matrix multiply"
    summary = "A dense contraction: the regular, compute-heavy case libraries are built for."
    paths = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU, PathId.CUDA)

    m: int = Field(default=512, ge=1, le=16384, description="Rows of A and C.")
    n: int = Field(default=512, ge=1, le=16384, description="Columns of B and C.")
    k: int = Field(default=512, ge=1, le=16384, description="The contracted dimension.")
    dtype: Annotated[Dtype, Lax] = Field(
        default=Dtype.FLOAT32, description="Storage type of A, B and C."
    )
    precision: Annotated[Precision, Lax] = Field(
        default=Precision.DEFAULT, description="Contraction precision (jax.lax.Precision)."
    )
    kernel: Annotated[MatmulKernel, Lax] = Field(
        default=MatmulKernel.TILED,
        description="The implementation. JAX paths: xla (XLA's own kernels, the default; any "
        "value but pallas reads as xla) or pallas (a tiled Pallas kernel, float32 "
        "accumulator). cuda: tiled (shared memory, the default) or naive (a thread per output).",
    )

    def output_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype.value] * self.m * self.n

    def input_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        return size * (self.m * self.k + self.k * self.n + self.m * self.n)

    def flop_count(self) -> float:
        return product_flops(self.m, self.n, self.k)

    def byte_count(self) -> float:
        # A and B read once, C written once.
        return float(self.input_bytes())

    def tolerance(self) -> float:
        return self.tolerance_at(None)

    def contraction_precision(self) -> Precision:
        return self.precision

    def tolerance_at(self, arithmetic: Arithmetic | None) -> float:
        return contraction_tolerance(self.dtype, self.precision, self.k, arithmetic)

    def peak(self, calls_alive: int = 1) -> Peak:
        """As workers.run.execute runs it, the output checked exactly or, when large, by
        projections (workers.catalog.product_check)."""
        return product_peak((self.m, self.n, self.k), DTYPE_BYTES[self.dtype.value], calls_alive)
