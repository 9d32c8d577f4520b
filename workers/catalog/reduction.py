"""`reduction`: a sum or a softmax over one axis of a rows × cols matrix."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, WorkloadParams
from workers.protocol import PathId


class ReductionOp(StrEnum):
    """What a reduction computes along its axis."""

    SUM = "sum"
    SOFTMAX = "softmax"


class ReductionKernel(StrEnum):
    """The implementation: a hand-written CUDA kernel on cuda, XLA's own on JAX paths."""

    TREE = "tree"
    NAIVE = "naive"
    XLA = "xla"


class ReductionParams(WorkloadParams):
    workload = "reduction"
    title = "Reduction"
    summary = (
        "A sum or a softmax along one axis: every output depends on many inputs, so the "
        "compiler must choose how to split the work and combine the partial results."
    )
    paths = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU, PathId.CUDA)

    rows: int = Field(default=1024, ge=1, le=1 << 16, description="Rows of the matrix.")
    cols: int = Field(default=1024, ge=1, le=1 << 16, description="Columns of the matrix.")
    op: Annotated[ReductionOp, Lax] = Field(
        default=ReductionOp.SUM, description="sum, or softmax (max, exp, sum, divide)."
    )
    axis: int = Field(default=1, ge=0, le=1, description="0 reduces over rows, 1 over columns.")
    dtype: Annotated[Dtype, Lax] = Field(default=Dtype.FLOAT32, description="Storage type.")
    kernel: Annotated[ReductionKernel, Lax] = Field(
        default=ReductionKernel.TREE,
        description="The implementation. JAX paths: xla (the only one; any value reads as "
        "xla). cuda: tree (threads cooperate, the default) or naive (a thread per output).",
    )

    def reduced_length(self) -> int:
        """How many elements each output combines."""
        return self.cols if self.axis == 1 else self.rows

    def output_elements(self) -> int:
        """Elements in the result: one per kept index for a sum, all of them for a softmax."""
        if self.op is ReductionOp.SOFTMAX:
            return self.rows * self.cols
        return self.rows if self.axis == 1 else self.cols

    def output_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype.value] * self.output_elements()

    def input_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        return size * (self.rows * self.cols + self.output_elements())
