"""`sharded-matmul`: C[m, n] = A[m, k] @ B[k, n] across a mesh of devices.

The `sharding` choice decides where each operand and the output live, and so which
collectives XLA must insert: `data` shards the batch (rows of A and C) and needs none;
`tensor` shards the contracted dimension k, leaving partial sums that an all-reduce
combines; `gathered` shards A by rows and B by columns but asks for a replicated output,
which takes all-gathers. `custom` reads the three partition specs from the parameters.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, Precision
from workers.catalog.kernels import MatmulBlockFields
from workers.catalog.matmul import product_flops
from workers.catalog.mesh import (
    ArrayLayout,
    MeshError,
    MeshParams,
    Spec,
    parse_spec,
    shard_shape,
)
from workers.catalog.peak import Peak
from workers.catalog.product_check import product_peak
from workers.catalog.tolerances import contraction_tolerance


class Sharding(StrEnum):
    """Where the operands and the output of a sharded matmul live."""

    DATA = "data"
    TENSOR = "tensor"
    GATHERED = "gathered"
    CUSTOM = "custom"


class ShardedKernel(StrEnum):
    """The implementation: XLA's partitioned dot, or a Pallas kernel inside shard_map."""

    XLA = "xla"
    PALLAS = "pallas"


class ShardedMatmulParams(MeshParams, MatmulBlockFields):
    workload = "sharded-matmul"
    title = "Sharded matrix multiply"
    summary = (
        "One matmul spread over a mesh: the sharding of A, B and C decides which "
        "collectives the compiler inserts and how much each device holds."
    )

    m: int = Field(default=512, ge=1, le=16384, description="Rows of A and C (the batch).")
    n: int = Field(default=512, ge=1, le=16384, description="Columns of B and C.")
    k: int = Field(default=512, ge=1, le=16384, description="The contracted dimension.")
    dtype: Annotated[Dtype, Lax] = Field(default=Dtype.FLOAT32, description="Storage type.")
    precision: Annotated[Precision, Lax] = Field(
        default=Precision.DEFAULT, description="Contraction precision (jax.lax.Precision)."
    )
    sharding: Annotated[Sharding, Lax] = Field(
        default=Sharding.TENSOR,
        description=(
            "data: rows of A and C sharded, no collective; tensor: k sharded, an all-reduce; "
            "gathered: A by rows, B by columns, output replicated, all-gathers; "
            "custom: the specs below."
        ),
    )
    kernel: Annotated[ShardedKernel, Lax] = Field(
        default=ShardedKernel.XLA,
        description="The implementation: xla (the default: XLA partitions the dot and adds "
        "the collectives) or pallas (the matmul kernel on each device's shards inside "
        "shard_map, the collectives written out).",
    )
    a_spec: str = Field(
        default="", max_length=80, description="sharding=custom: A's spec, e.g. x,- (rows over x)."
    )
    b_spec: str = Field(default="", max_length=80, description="sharding=custom: B's spec.")
    out_spec: str = Field(default="", max_length=80, description="sharding=custom: C's spec.")

    def specs(self) -> tuple[Spec, Spec, Spec]:
        """The partition specs of A, B and C."""
        every = self.axis_names()
        whole: tuple[str, ...] = ()
        if self.sharding is Sharding.DATA:
            return (every, whole), (whole, whole), (every, whole)
        if self.sharding is Sharding.TENSOR:
            return (whole, every), (every, whole), (whole, whole)
        if self.sharding is Sharding.GATHERED:
            return (every, whole), (whole, every), (whole, whole)
        found: list[Spec] = []
        for field in ("a_spec", "b_spec", "out_spec"):
            text: str = getattr(self, field)
            if not text.strip():
                raise MeshError(field, "give a partition spec (e.g. x,-) when sharding=custom")
            found.append(parse_spec(text, field, 2, every))
        return found[0], found[1], found[2]

    def arrays(self) -> list[ArrayLayout]:
        a, b, out = self.specs()
        return [
            ArrayLayout("a", (self.m, self.k), a, ("m", "k")),
            ArrayLayout("b", (self.k, self.n), b, ("k", "n")),
            ArrayLayout("out", (self.m, self.n), out, ("m", "n"), role="output"),
        ]

    def check(self) -> None:
        if self.sharding is not Sharding.CUSTOM:
            for field in ("a_spec", "b_spec", "out_spec"):
                if getattr(self, field):
                    raise MeshError(field, "only read when sharding=custom")
        super().check()

    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype.value]

    def flop_count(self) -> float:
        # The whole product, summed over the devices: sharding moves work, it adds none.
        return product_flops(self.m, self.n, self.k)

    def byte_count(self) -> float:
        size = self.element_bytes()
        return float(size * (self.m * self.k + self.k * self.n + self.m * self.n))

    def tolerance(self) -> float:
        return self.tolerance_at(None)

    def contraction_precision(self) -> Precision:
        return self.precision

    def tolerance_at(self, arithmetic: Arithmetic | None) -> float:
        return contraction_tolerance(self.dtype, self.precision, self.k, arithmetic)

    def peak(self, calls_alive: int = 1) -> Peak:
        """As workers.run.execute runs it, with every device's shards placed (a replicated
        array: a whole copy on each), the output checked exactly or, when large, by
        projections (workers.catalog.product_check)."""
        sizes, size = self.axis_sizes(), self.element_bytes()
        placed = {"input": 0, "output": 0}
        for layout in self.arrays():
            placed[layout.role] += math.prod(shard_shape(layout, sizes)) * size * self.devices_
        shape = (self.m, self.n, self.k)
        return product_peak(shape, size, calls_alive, (placed["input"], placed["output"]))
