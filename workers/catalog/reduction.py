"""`reduction`: a sum or a softmax over one axis of a rows × cols matrix."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, WorkloadParams
from workers.catalog.tolerances import UNIT_ROUNDOFF
from workers.protocol import PathId


class ReductionOp(StrEnum):
    """What a reduction computes along its axis."""

    SUM = "sum"
    SOFTMAX = "softmax"


# Rounding the result to the storage type: one unit roundoff per element, with margin.
_OUTPUT_ERROR: dict[str, float] = {"float32": 1e-6, "bfloat16": 1e-2, "float16": 2e-3}

# Flops per input element: a sum adds once; a softmax takes a max, a subtraction, an
# exponential, an add for the normalizer and a division.
_FLOPS_PER_ELEMENT: dict[ReductionOp, int] = {ReductionOp.SUM: 1, ReductionOp.SOFTMAX: 5}


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

    def flop_count(self) -> float:
        return float(_FLOPS_PER_ELEMENT[self.op] * self.rows * self.cols)

    def byte_count(self) -> float:
        return float(self.input_bytes())

    def tolerance(self) -> float:
        # The float32 accumulation adds rounding errors that grow like √length.
        accumulate = 4 * UNIT_ROUNDOFF["float32"] * math.sqrt(self.reduced_length())
        return _OUTPUT_ERROR[self.dtype.value] + accumulate
