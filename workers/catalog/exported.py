"""`exported`: a user's own function, brought as a serialized `jax.export` artifact.

The function arrives as data — StableHLO with its calling convention — never as Python:
`boundary export-fn` serializes it on the user's machine, the server stores the bytes by
their SHA-256, and a worker deserializes and compiles them. Its parameters name stored
files by digest: the artifact, optionally an .npz of inputs and an .npz of reference
outputs. Pydantic only, no jax.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field

from workers.catalog.arithmetic import Arithmetic, result_tolerance
from workers.catalog.base import WorkloadParams
from workers.protocol import Lax, PathId

SHA256 = r"^[0-9a-f]{64}$"

MAX_EXPORT_BYTES = 16 * 1024 * 1024
"""Default cap on an uploaded artifact or .npz (the server's UPLOAD_MAX_BYTES may differ)."""

EXPORT_MEDIA_TYPE = "application/vnd.jax.exported"
"""How the store labels a serialized jax.export.Exported."""

NPZ_MEDIA_TYPE = "application/x-npz"
"""How the store labels a NumPy .npz archive of arrays."""

STAND_IN_TOO_BIG = "the same artifact on the CPU would need"
"""How the reason begins when a run on a GPU or TPU goes unchecked because the CPU run
that would stand in for a reference needs more host memory than the worker's job limit
(workers/workloads/exported.py); the run page's advice follows from it."""

JAX_PLATFORM: dict[PathId, str] = {
    PathId.JAX_CPU: "cpu",
    PathId.JAX_GPU: "cuda",
    PathId.JAX_TPU: "tpu",
}
"""The jax.export platform name a path's devices answer to (jax-gpu: NVIDIA's CUDA)."""

DEFAULT_TOLERANCE: dict[str, float] = {
    "float64": 1e-12,
    "complex128": 1e-12,
    "float32": 1e-4,
    "complex64": 1e-4,
    "float16": 5e-3,
    "bfloat16": 2e-2,
}
"""Relative error allowed when the job declares no tolerance, by the result's dtype.

Looser than a catalog workload's own bounds because the function is unknown: float32
allows for a GPU's TF32 contractions; integers and booleans must match exactly (0)."""

VALUE_PARAMS: frozenset[str] = frozenset(
    {"inputs", "reference", "input_rules", "tolerance", "seed", "check"}
)
"""Parameters of an uploaded program that choose its input values or how its output is
checked, never a shape: they cannot change what the compiler compiles."""


class CheckRule(StrEnum):
    """How an uploaded program's results are judged when the job sets no tolerance."""

    CHIP = "chip"
    STRICT = "strict"


Digest = Annotated[str, Field(pattern=SHA256, description="SHA-256 of a stored file (hex).")]
DimName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")]
DimSize = Annotated[int, Field(ge=1, le=2**31 - 1)]


class ExportedParams(WorkloadParams):
    workload = "exported"
    title = "Your exported function"
    summary = (
        "A function you exported with jax.export (boundary export-fn): its StableHLO is "
        "compiled and timed like any catalog workload; no Python of yours runs on a worker."
    )
    # `tolerance` is also the name of the method every workload has, so the field is
    # `tolerance_` in Python and `tolerance` on the wire, in both directions.
    model_config = ConfigDict(serialize_by_alias=True)

    paths = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU)
    # Its device count is the artifact's own (`nr_devices`): a target needs at least that
    # many, checked where the artifact is read (the server's uploads, the worker's bind).
    spans_artifact_devices = True

    file_fields: ClassVar[dict[str, str]] = {
        "artifact": EXPORT_MEDIA_TYPE,
        "inputs": NPZ_MEDIA_TYPE,
        "reference": NPZ_MEDIA_TYPE,
    }
    """Parameters that name stored files, with the kind of file each must be."""

    artifact: Digest = Field(description="SHA-256 of the uploaded .jaxexport artifact.")
    inputs: Digest | None = Field(
        default=None,
        description="SHA-256 of an uploaded .npz of inputs (arg0, arg1, …); seeded if absent.",
    )
    reference: Digest | None = Field(
        default=None,
        description="SHA-256 of an uploaded .npz of expected results: whole (out0, … or by "
        "path) or sampled (out0.indices with out0.values, …).",
    )
    input_rules: dict[str, dict[str, Any]] | None = Field(
        default=None,
        max_length=256,
        description="How generated inputs are drawn, per argument path or prefix (`a/b/*`): "
        '{"kind": "normal", "scale": s}, {"kind": "uniform", "low": a, "high": b}, '
        '{"kind": "zeros"}, {"kind": "ones"}, {"kind": "int", "low": a, "high": b}, '
        '{"kind": "positive"}. The longest matching path wins.',
    )
    tolerance_: float | None = Field(
        default=None,
        gt=0,
        le=1,
        alias="tolerance",
        description="Largest relative error that passes; by the output's dtype if absent.",
    )
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="Seed of generated inputs.")
    check: Annotated[CheckRule, Lax] = Field(
        default=CheckRule.CHIP,
        description="How a result's tolerance is set when `tolerance` is absent: `chip` (the "
        "default) by its dtype and the arithmetic the platform ran the program's float32 "
        "products at (one bfloat16 pass on a TPU at DEFAULT precision); `strict` by its "
        "dtype alone, as if every product were float32.",
    )
    dims: dict[DimName, DimSize] = Field(
        default_factory=dict,
        max_length=16,
        # A JSON Schema's patternProperties leave other names allowed; the server refuses them.
        json_schema_extra={"additionalProperties": False},
        description="A value for each symbolic dimension of the artifact (exported with "
        'jax.export.symbolic_shape), e.g. {"b": 64}; its shapes are then concrete.',
    )

    def input_bytes(self) -> int:
        # Unknown until the artifact is read: the server checks its declared shapes against
        # the cap when the job is submitted, and the worker again before it runs.
        return 0

    # flop_count and byte_count stay None: the function is unknown until its artifact is
    # read, so the worker takes the compiler's cost analysis and the artifact's shapes.

    def tolerance(self) -> float | None:
        """The job's declared tolerance, for every result; None when it declares none
        (each result then has its dtype's default: `result_tolerance`)."""
        return self.tolerance_

    def result_tolerance(self, dtype: str, arithmetic: Arithmetic | None = None) -> float:
        """The tolerance of a result of `dtype`: the job's, else the dtype's default (0,
        an exact match, for integers, booleans and any dtype not listed), loosened for a
        float32 result to what `arithmetic` allows unless the job asks for `strict`."""
        if self.tolerance_ is not None:
            return self.tolerance_
        default = DEFAULT_TOLERANCE.get(dtype, 0.0)
        if self.check is CheckRule.STRICT:
            return default
        return result_tolerance(dtype, arithmetic, default)

    def loosest_tolerance(self) -> float:
        """The largest tolerance any result of this job may have: the job's, else the
        loosest dtype default or arithmetic allowance (what bounds a result whose dtype is
        not known)."""
        if self.tolerance_ is not None:
            return self.tolerance_
        coarse = (
            0.0
            if self.check is CheckRule.STRICT
            else result_tolerance("float32", Arithmetic.BF16X1, 0.0)
        )
        return max(*DEFAULT_TOLERANCE.values(), coarse)

    def may_go_unchecked(self) -> bool:
        # Without reference outputs the worker checks against the same artifact on the CPU
        # when it can; when it cannot, a finite output is honestly unchecked.
        return self.reference is None

    def files(self) -> dict[str, str]:
        """The stored files this job needs, by parameter name → SHA-256."""
        named = {"artifact": self.artifact, "inputs": self.inputs, "reference": self.reference}
        return {name: sha for name, sha in named.items() if sha is not None}
