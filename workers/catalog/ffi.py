"""`ffi`: y = x · scale + shift, computed by a compiled handler JAX calls through XLA's FFI."""

from __future__ import annotations

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, WorkloadParams
from workers.catalog.tolerances import UNIT_ROUNDOFF
from workers.protocol import PathId


class FfiParams(WorkloadParams):
    workload = "ffi"
    title = "FFI custom call"
    summary = (
        "A scaled shift done by a hand-written C++ (CPU) or CUDA (GPU) handler that JAX "
        "calls through XLA's FFI: the narrow boundary between JAX and compiled code. "
        "float32 only; not differentiable."
    )
    paths = (PathId.JAX_CPU, PathId.JAX_GPU)
    no_target = "its handler is built against the worker's own devices and registered there"

    n: int = Field(default=1 << 20, ge=1, le=1 << 28, description="Elements in the vector.")
    scale: float = Field(
        default=2.0, ge=-1e6, le=1e6, allow_inf_nan=False, description="The 'scale' attribute."
    )
    shift: float = Field(
        default=0.5, ge=-1e6, le=1e6, allow_inf_nan=False, description="The 'shift' attribute."
    )

    def output_bytes(self) -> int:
        return self.n * DTYPE_BYTES["float32"]

    def input_bytes(self) -> int:
        # One float32 input and one float32 output.
        return 2 * self.n * DTYPE_BYTES["float32"]

    def flop_count(self) -> float:
        return 2.0 * self.n  # a multiply and an add per element

    def byte_count(self) -> float:
        return float(self.input_bytes())

    def tolerance(self) -> float:
        # The attributes and the product are each rounded to float32 once (float32(scale)
        # differs from scale by up to one unit roundoff), with margin for a fused multiply-add.
        return 8 * UNIT_ROUNDOFF["float32"]
