"""`gather`: rows of a table picked by random indices, out[i] = table[index[i]]."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, WorkloadParams


class GatherParams(WorkloadParams):
    workload = "gather"
    title = "Gather"
    summary = (
        "Rows fetched at random indices: irregular memory access with no arithmetic, the "
        "case where caches and memory latency decide the time."
    )

    rows: int = Field(default=1 << 16, ge=1, le=1 << 24, description="Rows in the table.")
    width: int = Field(default=64, ge=1, le=4096, description="Elements per row.")
    count: int = Field(default=1 << 14, ge=1, le=1 << 24, description="Rows gathered.")
    dtype: Annotated[Dtype, Lax] = Field(default=Dtype.FLOAT32, description="Table storage type.")

    def output_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype.value] * self.count * self.width

    def input_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        index = DTYPE_BYTES["int32"] * self.count
        return size * (self.rows * self.width + self.count * self.width) + index

    def flop_count(self) -> float:
        return 0.0  # a copy: no arithmetic

    def byte_count(self) -> float:
        # Only the gathered rows are read, plus the indices; the output is written once.
        size = DTYPE_BYTES[self.dtype.value]
        index = DTYPE_BYTES["int32"] * self.count
        return float(2 * self.count * self.width * size + index)

    def tolerance(self) -> float:
        # A gather copies values exactly: any difference at all is a wrong answer.
        return 0.0
