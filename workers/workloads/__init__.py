"""The JAX side of the catalog: one module per workload, registered here by name.

Importing this package imports jax; the server imports `workers.catalog` instead.
"""

from __future__ import annotations

from typing import Any

from workers.workloads.attention import Attention
from workers.workloads.base import Check, HostArray, InputSpec, JaxFunction, Workload
from workers.workloads.collective import Collective
from workers.workloads.elementwise import Elementwise
from workers.workloads.exported import ExportedFunction
from workers.workloads.ffi import Ffi
from workers.workloads.gather import Gather
from workers.workloads.matmul import Matmul
from workers.workloads.reduction import Reduction
from workers.workloads.sharded_matmul import ShardedMatmul

__all__ = [
    "WORKLOADS",
    "Check",
    "HostArray",
    "InputSpec",
    "JaxFunction",
    "Workload",
    "get_workload",
]

WORKLOADS: dict[str, Workload[Any]] = {
    w.name: w for w in (Matmul(), Elementwise(), Reduction(), Gather(), Attention())
}
"""Every workload the runner can execute, by catalog name."""
WORKLOADS[Ffi.name] = Ffi()  # JAX calling a compiled handler through XLA's FFI
WORKLOADS.update({w.name: w for w in (ShardedMatmul(), Collective())})  # the scale stage's
WORKLOADS[ExportedFunction.name] = ExportedFunction()  # a user's jax.export artifact


def get_workload(name: str) -> Workload[Any]:
    """The workload called `name`; KeyError if the catalog has none by that name."""
    return WORKLOADS[name]
