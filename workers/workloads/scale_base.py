"""The base of every scale workload: a function written for a mesh, not one device."""

from __future__ import annotations

from abc import abstractmethod
from typing import TypeVar

import jax
from jax.sharding import Mesh

from workers.catalog.kernels import KernelChoice
from workers.catalog.mesh import MeshParams
from workers.scale.mesh import mesh_for
from workers.workloads.base import JaxFunction, Workload

M = TypeVar("M", bound=MeshParams)


class ScaleWorkload(Workload[M]):
    """A workload whose arrays are laid out over a mesh of devices.

    Its parameters (a `MeshParams`) carry the mesh shape, axis names and each array's
    partition spec; `mesh_function` builds the JAX function for a given mesh (the engine
    and the scaling series pass theirs). `explain` says in words why a collective of a
    given kind appears, in terms of this workload's sharding choice.
    """

    @abstractmethod
    def mesh_function(self, params: M, mesh: Mesh) -> JaxFunction:
        """The function to jit for `mesh`; inputs arrive sharded as `params.arrays()` says."""

    def function(self, params: M) -> JaxFunction:
        # Without a mesh given, lay one over the default backend's first devices.
        return self.mesh_function(params, mesh_for(params, jax.devices()))

    def pallas_mesh_function(self, params: M, mesh: Mesh, choice: KernelChoice) -> JaxFunction:
        """`mesh_function` with the work done by a Pallas kernel inside shard_map."""
        raise NotImplementedError(f"{self.name} has no Pallas kernel")

    def pallas_function(self, params: M, choice: KernelChoice) -> JaxFunction:
        return self.pallas_mesh_function(params, mesh_for(params, jax.devices()), choice)

    def mesh_function_for(self, params: M, mesh: Mesh, choice: KernelChoice | None) -> JaxFunction:
        """The function for `mesh`: XLA's, or the Pallas kernel's when `choice` says so."""
        if choice is not None and choice.pallas:
            return self.pallas_mesh_function(params, mesh, choice)
        return self.mesh_function(params, mesh)

    @abstractmethod
    def explain(self, params: M, kind: str, source: str | None) -> str:
        """Why a collective of `kind`, moving `source`, follows from the sharding choice."""

    def no_collective_reason(self, params: M) -> str | None:
        """Why the program needs no communication, when that is what the layout implies."""
        return None
