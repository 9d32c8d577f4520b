"""`ffi` on JAX: a custom call to a compiled handler (see workers.cuda.ffi)."""

from __future__ import annotations

from collections.abc import Sequence

from workers.catalog.ffi import FfiParams
from workers.cuda.ffi import make_scale_shift, register_for_this_process
from workers.workloads.base import (
    HostArray,
    InputSpec,
    JaxFunction,
    Workload,
    as_float64,
)


class Ffi(Workload[FfiParams]):
    """x · scale + shift by an XLA FFI handler: StableHLO shows `stablehlo.custom_call`,
    the optimized HLO a `custom-call` whose target is the handler's name."""

    name = "ffi"
    params_type = FfiParams

    def input_specs(self, params: FfiParams) -> list[InputSpec]:
        return [InputSpec("x", (params.n,), "float32")]

    def function(self, params: FfiParams) -> JaxFunction:
        # The handler is built (first use only) and registered before anything is traced.
        register_for_this_process()
        return make_scale_shift(params.scale, params.shift)

    def reference(self, params: FfiParams, inputs: Sequence[HostArray]) -> HostArray:
        result: HostArray = as_float64(inputs[0]) * params.scale + params.shift
        return result
