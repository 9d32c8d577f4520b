"""The base of every workload's parameter model. Pydantic only: the server imports it."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.peak import Peak, dense_peak
from workers.protocol import Lax, PathId, StageId

__all__ = ["DTYPE_BYTES", "Dtype", "Lax", "Precision", "WorkloadParams"]

DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4}


class Dtype(StrEnum):
    """Floating-point storage types a workload may take."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"


class Precision(StrEnum):
    """jax.lax.Precision for contractions: how many bf16 passes a float32 dot may use."""

    DEFAULT = "default"
    HIGH = "high"
    HIGHEST = "highest"


class WorkloadParams(BaseModel):
    """Typed, bounded parameters of one workload.

    Subclasses declare fields with bounds; `input_bytes` says how much device memory the
    inputs and outputs take so the total can be capped before a job is queued.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    # Enum fields must be annotated `Annotated[Dtype, Lax]`: see workers.protocol.StrictModel.

    workload: ClassVar[str]
    title: ClassVar[str]
    summary: ClassVar[str]
    paths: ClassVar[tuple[PathId, ...]] = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU)
    stages: ClassVar[tuple[StageId, ...]] = (StageId.COMPILE, StageId.EXECUTE)
    no_target: ClassVar[str | None] = None
    """Why this workload takes no target (see workers.catalog.target_rules); None: it does."""
    spans_artifact_devices: ClassVar[bool] = False
    """True when the device count comes from an uploaded artifact, not the parameters."""

    def input_bytes(self) -> int:
        """Bytes of inputs plus outputs the workload places on the device."""
        raise NotImplementedError

    def output_bytes(self) -> int | None:
        """Bytes of one call's output; None when the parameters alone cannot say (the
        engine then takes the compiled program's own figure before anything runs)."""
        return None

    def devices(self) -> int:
        """How many devices one run spans."""
        return 1

    def item_bytes(self) -> int:
        """Bytes per element of the storage type (4 when the workload has no dtype)."""
        dtype = getattr(self, "dtype", None)
        return DTYPE_BYTES.get(str(getattr(dtype, "value", "")), 4)

    def peak(self, calls_alive: int = 1) -> Peak:
        """The job's estimated peak host memory (workers.catalog.peak): by default a
        single-shape program's, from its input and output bytes. `calls_alive` outputs
        are kept at once while sampling (throughput mode's K)."""
        output = self.output_bytes() or 0
        inputs = max(self.input_bytes() - output, 0)
        return dense_peak(inputs, output, self.item_bytes(), calls_alive)

    def flop_count(self) -> float | None:
        """Floating-point operations one call performs, counted analytically from the
        parameters (not a compiler's estimate); None when the catalog has no formula, so
        no rate is shown from it."""
        return None

    def byte_count(self) -> float | None:
        """Bytes one call must at least move to and from memory (inputs read, output
        written); None when the catalog has no formula."""
        return None

    def tolerance(self) -> float | None:
        """The largest relative error ‖out − ref‖ / ‖ref‖ that still passes; None when
        the catalog sets no tolerance for the workload's output as a whole."""
        return None

    def contraction_precision(self) -> Precision | None:
        """The precision the workload's float32 contractions ask for; None when it has
        none (its products, if any, are not float32 dots or convolutions)."""
        return None

    def tolerance_at(self, arithmetic: Arithmetic | None) -> float | None:
        """`tolerance()` when the platform ran the contractions at `arithmetic` (None:
        unknown, so the bound admits what any platform does at the requested precision)."""
        return self.tolerance()

    def may_go_unchecked(self) -> bool:
        """Whether a run may honestly have nothing to check its output against (its timings
        then stand, said to be of an unverified output). Every catalog workload has a
        float64 reference, so by default no run may claim to be unchecked."""
        return False
