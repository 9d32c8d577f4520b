"""The scale stage: placement on a mesh, scaling series and multi-process groups."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workers.protocol.base import BoundaryId, OpenModel

PlacementKind = Literal["replicated", "partitioned", "gathered-and-redistributed"]


class ShardShapes(OpenModel):
    """What one device holds of each array: its shard's shape and its slice of the whole."""

    device: int
    process: int | None = None
    position: int | None = Field(
        default=None,
        description="The device's place in the mesh, row-major: the id replica groups use.",
    )
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    slices: dict[str, str] = Field(
        default_factory=dict, description="The shard's place in the global array, e.g. [0:64, :]."
    )


class DeviceMemory(OpenModel):
    """Bytes one device needs for the program; `source` says where each figure came from."""

    device: int
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    peak_bytes: int | None = None
    in_use_peak_bytes: int | None = Field(
        default=None, description="The device allocator's own peak, where the backend reports it."
    )
    source: str = ""


class Intermediate(OpenModel):
    """One value of the partitioned program and how it lies across the devices."""

    name: str
    op: str
    jax_op: str | None = None
    shape: str = Field(description="The per-device shape in the partitioned HLO.")
    placement: PlacementKind
    detail: str | None = None


class CollectiveExplanation(OpenModel):
    """Why one collective is in the program: which sharding choice put it there."""

    kind: str
    shape: str
    bytes: int | None = None
    groups: str | None = None
    source: str | None = Field(default=None, description="The value it moves, traced back.")
    jax_op: str | None = None
    because: str


class Placement(OpenModel):
    """How a run's arrays and intermediates are placed on its mesh."""

    devices: int
    mesh_shape: list[int]
    axis_names: list[str]
    axis_types: list[str] = Field(default_factory=list)
    in_specs: dict[str, str] = Field(default_factory=dict)
    out_spec: str = ""
    global_shapes: dict[str, list[int]] = Field(default_factory=dict)
    shards: list[ShardShapes] = Field(default_factory=list)
    memory: list[DeviceMemory] = Field(default_factory=list)
    memory_note: str | None = None
    intermediates: list[Intermediate] = Field(default_factory=list)
    explanations: list[CollectiveExplanation] = Field(default_factory=list)
    note: str | None = Field(default=None, description="e.g. that the devices are virtual.")


class ScalingPoint(OpenModel):
    """One device count of a scaling series, timed over the whole step."""

    devices: int
    mode: Literal["strong", "weak"]
    mesh_shape: list[int]
    global_shapes: dict[str, list[int]] = Field(default_factory=dict)
    per_device_shapes: dict[str, list[int]] = Field(default_factory=dict)
    boundary: BoundaryId = BoundaryId.HOST_SYNC
    samples_s: list[float] = Field(default_factory=list)
    median_s: float | None = Field(
        default=None, description="Median step time: call until every shard of the output is ready."
    )
    collectives: list[str] = Field(default_factory=list)
    correct: bool | None = None
    error: float | None = None
    note: str | None = None


class ScalingSeries(OpenModel):
    """Strong and/or weak scaling over device counts 1, 2, 4, … as one job."""

    points: list[ScalingPoint] = Field(default_factory=list)
    boundary: BoundaryId = BoundaryId.HOST_SYNC
    label: str = Field(description="What the timings are and are not, e.g. for virtual devices.")
    per_device_note: str | None = None
    skipped: list[str] = Field(default_factory=list)


class GroupProcess(OpenModel):
    """One process of a multi-process worker group and what it saw of a run."""

    process_id: int
    local_devices: int
    passed: bool | None = None
    error: float | None = None
    median_s: float | None = None
    message: str | None = None
    digest: str | None = Field(
        default=None, description="SHA-256 of the whole output as this process gathered it."
    )


class GroupReport(OpenModel):
    """A run made by several processes under jax.distributed, reported by process 0."""

    processes: int
    coordinator: str
    devices: int
    members: list[GroupProcess] = Field(default_factory=list)
    agreed: bool = Field(description="Every process computed the same output as process 0.")
