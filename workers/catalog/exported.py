"""`exported`: a user's own function, brought as a serialized `jax.export` artifact.

The function arrives as data — StableHLO with its calling convention — never as Python:
`boundary export-fn` serializes it on the user's machine, the server stores the bytes by
their SHA-256, and a worker deserializes and compiles them. Its parameters name stored
files by digest: the artifact, optionally an .npz of inputs and an .npz of reference
outputs. Pydantic only, no jax.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from workers.catalog.base import WorkloadParams
from workers.protocol import PathId

SHA256 = r"^[0-9a-f]{64}$"

MAX_EXPORT_BYTES = 16 * 1024 * 1024
"""Default cap on an uploaded artifact or .npz (the server's UPLOAD_MAX_BYTES may differ)."""

EXPORT_MEDIA_TYPE = "application/vnd.jax.exported"
"""How the store labels a serialized jax.export.Exported."""

NPZ_MEDIA_TYPE = "application/x-npz"
"""How the store labels a NumPy .npz archive of arrays."""

JAX_PLATFORM: dict[PathId, str] = {
    PathId.JAX_CPU: "cpu",
    PathId.JAX_GPU: "cuda",
    PathId.JAX_TPU: "tpu",
}
"""The jax.export platform name a path's devices answer to (jax-gpu: NVIDIA's CUDA)."""

Digest = Annotated[str, Field(pattern=SHA256, description="SHA-256 of a stored file (hex).")]


class ExportedParams(WorkloadParams):
    workload = "exported"
    title = "Your exported function"
    summary = (
        "A function you exported with jax.export (boundary export-fn): its StableHLO is "
        "compiled and timed like any catalog workload; no Python of yours runs on a worker."
    )
    paths = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU)
    no_target = "an uploaded function is compiled only for the worker's own devices"

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
        default=None, description="SHA-256 of an uploaded .npz of expected outputs (out0, …)."
    )
    tolerance: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Largest relative error that passes; by the output's dtype if absent.",
    )
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="Seed of generated inputs.")

    def input_bytes(self) -> int:
        # Unknown until the artifact is read: the server checks its declared shapes against
        # the cap when the job is submitted, and the worker again before it runs.
        return 0

    def may_go_unchecked(self) -> bool:
        # Without reference outputs the worker checks against the same artifact on the CPU
        # when it can; when it cannot, a finite output is honestly unchecked.
        return self.reference is None

    def files(self) -> dict[str, str]:
        """The stored files this job needs, by parameter name → SHA-256."""
        named = {"artifact": self.artifact, "inputs": self.inputs, "reference": self.reference}
        return {name: sha for name, sha in named.items() if sha is not None}
