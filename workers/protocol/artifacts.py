"""The IR texts a run carries (`Artifacts`) and their names, which are also the CLI's
`--ir` names, the IR views' and the API's artifact names."""

from __future__ import annotations

from pydantic import Field

from workers.protocol.base import OpenModel


class Artifacts(OpenModel):
    """IR text produced by the stages; None when a stage did not produce it."""

    jaxpr: str | None = None
    stablehlo: str | None = None
    hlo: str | None = None
    ptx: str | None = None
    sass: str | None = None
    mosaic: str | None = Field(
        default=None, description="Each TPU Pallas kernel's Mosaic MLIR, from its custom call."
    )
    bundles: str | None = Field(
        default=None,
        description="TPU targets: each kernel's final VLIW bundles (libtpu's LLO dump), "
        "headed by its schedule summary.",
    )
    triton: str | None = Field(
        default=None, description="Each Triton Pallas kernel as Pallas lowered it (tt dialect)."
    )
    mosaic_gpu: str | None = Field(
        default=None, description="Each Mosaic GPU Pallas kernel's MLIR, from its custom call."
    )


ARTIFACT_NAMES: tuple[str, ...] = (
    "jaxpr",
    "stablehlo",
    "hlo",
    "ptx",
    "sass",
    "mosaic",
    "bundles",
    "triton",
    "mosaic_gpu",
)
