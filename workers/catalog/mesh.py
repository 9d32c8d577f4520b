"""Parameters shared by the scale workloads: a device mesh, its axis names, partition
specs, and the checks that keep them consistent. Pydantic only, no jax.

A mesh is written as axis sizes joined by "x" ("8", "2x4"); axis names as a comma list
("x", "data,model"); a partition spec as one entry per array dimension, each an axis
name, several names joined by "+", or "-" for a dimension that is not sharded
("x,-" shards rows over axis x and keeps columns whole). Every inconsistency is reported
as a validation error on the field at fault, so the API answers 422 naming it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from workers.catalog.base import Lax, WorkloadParams
from workers.protocol import PathId, StageId

MESH_ERROR = "mesh_spec"
"""The pydantic error type of every mesh inconsistency (no numeric range applies)."""

MAX_DEVICES = 256
MAX_MESH_DIMS = 4
DEFAULT_AXES: tuple[str, ...] = ("x", "y", "z", "w")
_AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,15}$")

Spec = tuple[tuple[str, ...], ...]
"""A partition spec: for each array dimension, the mesh axes it is sharded over."""


class SeriesMode(StrEnum):
    """Which scaling series the scale stage runs."""

    STRONG = "strong"
    WEAK = "weak"
    BOTH = "both"


class MeshError(ValueError):
    """A mesh inconsistency, attributed to the parameter `field`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ArrayLayout:
    """One array of a scale workload: global shape, partition spec, and the parameter
    that sets each dimension's size (named in errors and scaled by weak scaling)."""

    name: str
    shape: tuple[int, ...]
    spec: Spec
    size_fields: tuple[str | None, ...]
    role: str = "input"


def parse_mesh(text: str, devices: int) -> tuple[int, ...]:
    """Axis sizes from "2x4"; the empty string means all devices along one axis."""
    if not text.strip():
        return (devices,)
    parts = text.lower().replace("×", "x").split("x")
    sizes: list[int] = []
    for raw in parts:
        part = raw.strip()
        if not part.isdigit() or int(part) < 1:
            raise MeshError("mesh", f"{text[:40]!r}: write axis sizes like 8 or 2x4")
        sizes.append(int(part))
    if len(sizes) > MAX_MESH_DIMS:
        raise MeshError("mesh", f"at most {MAX_MESH_DIMS} mesh axes, got {len(sizes)}")
    product = math.prod(sizes)
    if product != devices:
        shown = "×".join(map(str, sizes))
        raise MeshError(
            "mesh",
            f"axis sizes {shown} make {product} devices, but devices={devices}: "
            "the product of the axis sizes must equal devices",
        )
    return tuple(sizes)


def parse_axes(text: str, dims: int) -> tuple[str, ...]:
    """Axis names from "data,model"; the empty string means x, y, z, w in order."""
    if not text.strip():
        return DEFAULT_AXES[:dims]
    names = tuple(part.strip() for part in text.split(","))
    for name in names:
        if not _AXIS_NAME.match(name):
            raise MeshError("axes", f"{name[:20]!r} is not an axis name (letters, digits, _)")
    if len(set(names)) != len(names):
        raise MeshError("axes", "each axis name may appear once")
    if len(names) != dims:
        raise MeshError("axes", f"{len(names)} axis name(s) for a mesh of {dims} axes")
    return names


def parse_spec(text: str, field: str, ndim: int, axes: tuple[str, ...]) -> Spec:
    """A partition spec from "x,-" or "x+y,-", checked against the mesh's axis names."""
    entries = [part.strip() for part in text.split(",")]
    if len(entries) != ndim:
        raise MeshError(
            field, f"{text[:40]!r} has {len(entries)} entries; the array has {ndim} dimensions"
        )
    spec: list[tuple[str, ...]] = []
    used: set[str] = set()
    for entry in entries:
        if entry in {"-", "", "none", "None"}:
            spec.append(())
            continue
        names = tuple(name.strip() for name in entry.split("+"))
        for name in names:
            if name not in axes:
                raise MeshError(field, f"unknown mesh axis {name[:20]!r} (axes: {', '.join(axes)})")
            if name in used:
                raise MeshError(field, f"mesh axis {name!r} shards two dimensions")
            used.add(name)
        spec.append(names)
    return tuple(spec)


def format_spec(spec: Spec) -> str:
    """A spec the way JAX prints a PartitionSpec, e.g. P('x', None)."""
    parts = []
    for entry in spec:
        if not entry:
            parts.append("None")
        elif len(entry) == 1:
            parts.append(repr(entry[0]))
        else:
            parts.append("(" + ", ".join(repr(a) for a in entry) + ")")
    return f"P({', '.join(parts)})"


def shard_factor(entry: tuple[str, ...], sizes: dict[str, int]) -> int:
    """How many pieces a dimension sharded over `entry` is cut into."""
    return math.prod(sizes[name] for name in entry)


def shard_shape(layout: ArrayLayout, sizes: dict[str, int]) -> tuple[int, ...]:
    """The shape each device holds of `layout`'s array."""
    pairs = zip(layout.shape, layout.spec, strict=True)
    return tuple(dim // shard_factor(entry, sizes) for dim, entry in pairs)


def sub_mesh(shape: tuple[int, ...], devices: int) -> tuple[int, ...] | None:
    """A mesh of `devices` devices with the same axes, shrinking the leading axes first.

    Used by scaling series; None when `devices` does not factor over the axis sizes.
    """
    remaining = devices
    sizes = [1] * len(shape)
    for i in reversed(range(len(shape))):
        take = math.gcd(remaining, shape[i])
        sizes[i] = take
        remaining //= take
    return tuple(sizes) if remaining == 1 else None


def series_counts(devices: int) -> list[int]:
    """Device counts of a scaling series: 1, 2, 4, … below `devices`, then `devices`."""
    counts = []
    count = 1
    while count < devices:
        counts.append(count)
        count *= 2
    counts.append(devices)
    return counts


def _error(field: str, message: str, value: Any) -> ValidationError:
    detail = InitErrorDetails(
        type=PydanticCustomError(MESH_ERROR, "{message}", {"message": message}),
        loc=(field,),
        input=value,
    )
    return ValidationError.from_exception_data("mesh", [detail])


class MeshParams(WorkloadParams):
    """The parameters every scale workload shares: devices, mesh, axes and series."""

    # `devices` is also the name of the method every workload has, so the field is
    # `devices_` in Python and `devices` on the wire, in both directions.
    model_config = ConfigDict(serialize_by_alias=True)

    paths = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU)
    stages = (StageId.COMPILE, StageId.EXECUTE, StageId.SCALE)

    devices_: int = Field(
        default=8,
        ge=1,
        le=MAX_DEVICES,
        alias="devices",
        description="How many devices the mesh spans (jax-cpu: virtual CPU devices).",
    )
    mesh: str = Field(
        default="",
        max_length=40,
        description="Axis sizes, e.g. 8 or 2x4; empty: all devices along one axis.",
    )
    axes: str = Field(
        default="",
        max_length=80,
        description="Axis names, comma-separated, e.g. data,model; empty: x, y, z, w.",
    )
    series: Annotated[SeriesMode, Lax] = Field(
        default=SeriesMode.BOTH,
        description="The scale stage's scaling series: strong, weak or both.",
    )

    @field_validator("mesh", mode="before")
    @classmethod
    def _mesh_text(cls, value: Any) -> Any:
        # `boundary run ... mesh=8` reads 8 as a number; a mesh of one axis is still text.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        try:
            self.check()
        except MeshError as exc:
            raise _error(exc.field, str(exc), getattr(self, exc.field, None)) from None
        return self

    def devices(self) -> int:
        return self.devices_

    def mesh_shape(self) -> tuple[int, ...]:
        """The mesh's axis sizes."""
        return parse_mesh(self.mesh, self.devices_)

    def axis_names(self) -> tuple[str, ...]:
        """The mesh's axis names, one per axis."""
        return parse_axes(self.axes, len(self.mesh_shape()))

    def axis_sizes(self) -> dict[str, int]:
        return dict(zip(self.axis_names(), self.mesh_shape(), strict=True))

    def arrays(self) -> list[ArrayLayout]:
        """Every input (in call order) and then the output, with its spec."""
        raise NotImplementedError

    def check(self) -> None:
        """Raise MeshError unless mesh, axes, specs and sizes fit together."""
        sizes = self.axis_sizes()
        for layout in self.arrays():
            for dim, entry, field in zip(
                layout.shape, layout.spec, layout.size_fields, strict=True
            ):
                factor = shard_factor(entry, sizes)
                if dim % factor:
                    over = "+".join(entry)
                    raise MeshError(
                        field or "mesh",
                        f"{field or 'a dimension'}={dim} of {layout.name} does not divide "
                        f"evenly over mesh axes {over} ({factor} devices)",
                    )

    def input_bytes(self) -> int:
        # Every device holds its own shard of each array (a replicated array: a whole copy).
        sizes = self.axis_sizes()
        total = 0
        for layout in self.arrays():
            total += math.prod(shard_shape(layout, sizes)) * self.element_bytes()
        return total * self.devices_

    def element_bytes(self) -> int:
        """Bytes per element of the workload's storage type."""
        raise NotImplementedError

    def scaled(self, devices: int, mode: SeriesMode) -> Self:
        """These parameters at a point of a scaling series, re-validated.

        Strong scaling keeps every global size; weak scaling keeps every per-device shard
        and grows the sharded sizes with the device count. Raises MeshError when the
        point cannot be built (the device count does not factor over the mesh's axes).
        """
        shape = sub_mesh(self.mesh_shape(), devices)
        if shape is None:
            raise MeshError("mesh", f"{devices} devices do not factor over this mesh's axes")
        update: dict[str, Any] = {
            "devices": devices,
            "mesh": "x".join(map(str, shape)),
            "axes": ",".join(self.axis_names()),
        }
        weak = mode is SeriesMode.WEAK
        update.update(self.weak_sizes(shape) if weak else self.strong_sizes(shape))
        data = {**self.model_dump(by_alias=True, mode="json"), **update}
        try:
            return type(self).model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = str(first["loc"][0]) if first["loc"] else "mesh"
            raise MeshError(loc, first["msg"]) from None

    def strong_sizes(self, shape: tuple[int, ...]) -> dict[str, int]:
        """Size parameters that keep the global workload fixed on a mesh of `shape`."""
        return {}

    def weak_sizes(self, shape: tuple[int, ...]) -> dict[str, int]:
        """Size parameters that keep each device's shard fixed on a mesh of `shape`."""
        now = self.axis_sizes()
        then = dict(zip(self.axis_names(), shape, strict=True))
        update: dict[str, int] = {}
        for layout in self.arrays():
            for dim, entry, field in zip(
                layout.shape, layout.spec, layout.size_fields, strict=True
            ):
                if field is None or field in update or not entry:
                    continue
                update[field] = dim // shard_factor(entry, now) * shard_factor(entry, then)
        return update
