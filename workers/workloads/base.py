"""The JAX side of a catalog entry: inputs, function, float64 reference and work counts.

Each module in this package defines one `Workload` subclass; the parameter model it
takes lives in `workers.catalog`, which stays free of jax so the server can import it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import Precision, WorkloadParams
from workers.catalog.kernels import KernelChoice
from workers.measure.correctness import check_output
from workers.protocol import Correctness

HostArray = npt.NDArray[Any]
"""A NumPy array on the host (float64 references, inputs of any storage type)."""

JaxFunction = Callable[..., Any]
"""A pure function of device arrays returning one array (an uploaded function: a list of
its results): what gets traced and compiled."""

Check = Callable[[HostArray], Correctness]
"""Judges one output of a workload's inputs; several outputs of the same inputs (the cuda
path's kernel, cuBLAS and JAX) share one."""

P = TypeVar("P", bound=WorkloadParams)

LAX_PRECISION: dict[Precision, jax.lax.Precision] = {
    Precision.DEFAULT: jax.lax.Precision.DEFAULT,
    Precision.HIGH: jax.lax.Precision.HIGH,
    Precision.HIGHEST: jax.lax.Precision.HIGHEST,
}


@dataclass(frozen=True)
class InputSpec:
    """The name, shape and storage type of one argument of a workload's function."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))


class Workload(ABC, Generic[P]):
    """One workload's JAX function with everything needed to run and judge it.

    A workload is stateless: every method takes its validated parameters. Inputs are
    generated on the host from a seeded RNG (never zeros); the reference recomputes the
    output in float64 from those same, already-rounded inputs.
    """

    name: ClassVar[str]
    params_type: type[P]

    def typed(self, params: WorkloadParams) -> P:
        """`params` as this workload's own model, or TypeError if they belong to another."""
        if not isinstance(params, self.params_type):
            raise TypeError(f"{self.name} takes {self.params_type.__name__}, not {params!r}")
        return params

    def devices_spanned(self, params: P) -> int:
        """How many devices one run spans (an uploaded function: those it was exported for)."""
        return params.devices()

    @abstractmethod
    def input_specs(self, params: P) -> list[InputSpec]:
        """The function's arguments, in call order."""

    def make_inputs(self, params: P, rng: np.random.Generator) -> list[HostArray]:
        """Host arrays for every argument: standard normal values in the storage type."""
        return [random_normal(spec, rng) for spec in self.input_specs(params)]

    @abstractmethod
    def function(self, params: P) -> JaxFunction:
        """The pure JAX function; static choices (precision, masks) are closed over."""

    def pallas_function(self, params: P, choice: KernelChoice) -> JaxFunction:
        """The same function with its operation done by a Pallas kernel (`workers.pallas`);
        only the catalog's Pallas workloads have one."""
        raise NotImplementedError(f"{self.name} has no Pallas kernel")

    @abstractmethod
    def reference(self, params: P, inputs: Sequence[HostArray]) -> HostArray:
        """The expected output, computed in float64 with NumPy."""

    def checker(
        self, params: P, inputs: Sequence[HostArray], arithmetic: Arithmetic | None = None
    ) -> Check:
        """What judges an output of `inputs`, allowing for the `arithmetic` the platform ran
        the program's float32 products at (None: unknown): by default `check_output` against
        the float64 reference, computed once here. A dense product checks a large output by
        random projections instead (workers.workloads.matmul.product_checker)."""
        reference = self.reference(params, inputs)
        tolerance = self.tolerance(params, arithmetic)
        return lambda output: check_output(output, reference, tolerance)

    def flop_count(self, params: P) -> float:
        """Floating-point operations one call performs (analytic, not XLA's estimate): the
        catalog's formula (`WorkloadParams.flop_count`), the one the server uses too."""
        return _required(params.flop_count(), self.name, "flop_count")

    def byte_count(self, params: P) -> float:
        """Bytes one call must at least move to and from memory (inputs read, output
        written): the catalog's formula (`WorkloadParams.byte_count`)."""
        return _required(params.byte_count(), self.name, "byte_count")

    def tolerance(self, params: P, arithmetic: Arithmetic | None = None) -> float:
        """The largest relative error ‖out − ref‖ / ‖ref‖ that still passes: the catalog's
        at `arithmetic` (`WorkloadParams.tolerance_at`)."""
        return _required(params.tolerance_at(arithmetic), self.name, "tolerance")


def _required(figure: float | None, workload: str, name: str) -> float:
    """A catalog figure a workload must have; a workload whose catalog entry has none
    overrides the method that asks for it."""
    if figure is None:
        raise NotImplementedError(f"the catalog gives {workload} no {name}")
    return figure


def function_for(
    workload: Workload[Any], params: WorkloadParams, choice: KernelChoice | None
) -> JaxFunction:
    """The function a job traces: XLA's (`function`) or the Pallas kernel's."""
    if choice is not None and choice.pallas:
        return workload.pallas_function(params, choice)
    return workload.function(params)


def random_normal(spec: InputSpec, rng: np.random.Generator) -> HostArray:
    """Standard normal samples drawn in float32 and rounded to the spec's storage type."""
    values = rng.standard_normal(spec.shape, dtype=np.float32)
    return values.astype(jnp.dtype(spec.dtype))


def as_float64(array: HostArray) -> HostArray:
    """`array` widened to float64 (exact for every storage type we use)."""
    return np.asarray(array, dtype=np.float64)
