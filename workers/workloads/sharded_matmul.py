"""`sharded-matmul` on JAX: C = A @ B with A, B and C laid out over a mesh.

The function is the same dense product as `matmul`; only the layout differs, and the
compiler (SPMD partitioning) adds whatever communication the layout implies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.kernels import KernelChoice
from workers.catalog.mesh import format_spec
from workers.catalog.sharded_matmul import ShardedMatmulParams, Sharding
from workers.pallas import matmul as pallas_matmul
from workers.scale.mesh import partition_spec
from workers.workloads.base import LAX_PRECISION, Check, HostArray, InputSpec, JaxFunction
from workers.workloads.matmul import product_checker, product_reference
from workers.workloads.scale_base import ScaleWorkload

_constrain = cast(
    "Callable[[jax.Array, NamedSharding], jax.Array]", jax.lax.with_sharding_constraint
)
"""jax.lax.with_sharding_constraint, typed: pin a value's layout inside a jitted function."""


class ShardedMatmul(ScaleWorkload[ShardedMatmulParams]):
    """A dense product whose operands and output are sharded as the parameters say."""

    name = "sharded-matmul"
    params_type = ShardedMatmulParams
    pallas_module = pallas_matmul

    def input_specs(self, params: ShardedMatmulParams) -> list[InputSpec]:
        dtype = params.dtype.value
        return [
            InputSpec("a", (params.m, params.k), dtype),
            InputSpec("b", (params.k, params.n), dtype),
        ]

    def mesh_function(self, params: ShardedMatmulParams, mesh: Mesh) -> JaxFunction:
        precision = LAX_PRECISION[params.precision]
        out = NamedSharding(mesh, partition_spec(params.specs()[2]))

        def sharded_matmul(a: jax.Array, b: jax.Array) -> jax.Array:
            product = jnp.matmul(a, b, precision=precision)
            # Pinning the output's layout is what makes the needed collectives explicit.
            return _constrain(product, out)

        return sharded_matmul

    def pallas_mesh_function(
        self, params: ShardedMatmulParams, mesh: Mesh, choice: KernelChoice
    ) -> JaxFunction:
        shape = (params.m, params.n, params.k)
        precision = LAX_PRECISION[params.precision]
        return pallas_matmul.sharded_matmul_fn(
            mesh, params.specs(), shape, params.dtype.value, choice, precision=precision
        )

    def reference(self, params: ShardedMatmulParams, inputs: Sequence[HostArray]) -> HostArray:
        return product_reference(inputs)

    def checker(
        self,
        params: ShardedMatmulParams,
        inputs: Sequence[HostArray],
        arithmetic: Arithmetic | None = None,
    ) -> Check:
        return product_checker(inputs, self.tolerance(params, arithmetic))

    def explain(self, params: ShardedMatmulParams, kind: str, source: str | None) -> str:
        a, b, out = (format_spec(s) for s in params.specs())
        moved = f" ({source})" if source else ""
        if kind in {"all-reduce", "reduce-scatter"}:
            return (
                f"A {a} and B {b} both shard k, the contracted dimension, so each device "
                f"multiplies only its slice of k and holds partial sums of every output "
                f"element{moved}; C {out} asks for finished values, so XLA adds the partial "
                f"sums across the devices with an {kind}."
            )
        if kind == "all-gather":
            if params.sharding is Sharding.GATHERED or out == format_spec(((), ())):
                return (
                    f"C {out} is replicated while A {a} and B {b} are sharded, so every "
                    f"device must end up with data it does not hold: XLA all-gathers{moved} "
                    "to give each device the whole."
                )
            return (
                f"A value sharded by the layout (A {a}, B {b}) is needed whole by the next "
                f"step or by C {out}, so XLA all-gathers it{moved}."
            )
        if kind == "all-to-all":
            return (
                f"C {out} is sharded along a different dimension than the product comes out "
                f"in, so XLA reshards it with an all-to-all{moved}."
            )
        return f"The layout A {a}, B {b}, C {out} makes XLA move data: {kind}{moved}."

    def no_collective_reason(self, params: ShardedMatmulParams) -> str | None:
        a, b, out = (format_spec(s) for s in params.specs())
        if params.devices() == 1:
            return "One device holds everything: there is nobody to communicate with."
        return (
            f"A {a}, B {b}, C {out}: every device already holds all the data its block of "
            "C needs (its rows of A and the B it was given), so no collective is needed."
        )
