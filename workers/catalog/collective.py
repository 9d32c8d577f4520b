"""`collective`: one all-reduce, all-gather or reduce-scatter of a given size.

Each device contributes a buffer of `bytes` bytes (one shard of a 1-D array sharded over
every mesh axis), and the collective runs over the axes named by `over` (all of them by
default) inside `shard_map`, so the program is the collective and nothing else.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax
from workers.catalog.mesh import ArrayLayout, MeshError, MeshParams
from workers.catalog.tolerances import UNIT_ROUNDOFF

MAX_COLLECTIVE_BYTES = 256 * 1024**2


class CollectiveKind(StrEnum):
    """The communication pattern a `collective` job runs."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"


class CollectiveParams(MeshParams):
    workload = "collective"
    title = "Collective"
    summary = (
        "A standalone all-reduce, all-gather or reduce-scatter over mesh axes: the "
        "communication a sharded program pays for, on its own."
    )

    kind: Annotated[CollectiveKind, Lax] = Field(
        default=CollectiveKind.ALL_REDUCE, description="The collective to run."
    )
    bytes: int = Field(
        default=1024 * 1024,
        ge=4,
        le=MAX_COLLECTIVE_BYTES,
        description="Bytes each device contributes (its input buffer).",
    )
    dtype: Annotated[Dtype, Lax] = Field(default=Dtype.FLOAT32, description="Element type.")
    over: str = Field(
        default="",
        max_length=80,
        description="Mesh axes the collective runs over, comma-separated; empty: all.",
    )

    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype.value]

    def elements(self) -> int:
        """Elements in each device's input buffer."""
        return self.bytes // self.element_bytes()

    def over_axes(self) -> tuple[str, ...]:
        """The axes the collective runs over, in mesh order."""
        names = self.axis_names()
        if not self.over.strip():
            return names
        wanted = [part.strip() for part in self.over.split(",")]
        for name in wanted:
            if name not in names:
                known = ", ".join(names)
                raise MeshError("over", f"unknown mesh axis {name[:20]!r} (axes: {known})")
        if len(set(wanted)) != len(wanted):
            raise MeshError("over", "each axis may appear once")
        return tuple(name for name in names if name in wanted)

    def rest_axes(self) -> tuple[str, ...]:
        """The mesh axes the collective does not run over."""
        over = self.over_axes()
        return tuple(name for name in self.axis_names() if name not in over)

    def group_size(self) -> int:
        """Devices in each replica group."""
        sizes = self.axis_sizes()
        return math.prod(sizes[name] for name in self.over_axes())

    def flop_count(self) -> float:
        if self.kind is CollectiveKind.ALL_GATHER:
            return 0.0
        # One addition per element for every device in a group but the first.
        return float((self.group_size() - 1) * self.elements() * self.devices())

    def byte_count(self) -> float:
        # The bytes each device contributes, summed: the payload, not the wire traffic.
        return float(self.bytes * self.devices())

    def tolerance(self) -> float:
        if self.kind is CollectiveKind.ALL_GATHER:
            return 1e-12  # a copy: exact
        # A sum of G terms rounds at most G times in the storage type.
        return 4 * UNIT_ROUNDOFF[self.dtype.value] * (self.group_size() + 1)

    def arrays(self) -> list[ArrayLayout]:
        every = self.axis_names()
        rest = self.rest_axes()
        elements = self.elements()
        groups = self.devices_ // self.group_size()
        if self.kind is CollectiveKind.ALL_REDUCE:
            out = ArrayLayout("out", (groups * elements,), (rest,), ("bytes",), "output")
        elif self.kind is CollectiveKind.ALL_GATHER:
            out = ArrayLayout("out", (self.devices_ * elements,), (rest,), ("bytes",), "output")
        else:
            out = ArrayLayout(
                "out", (groups * elements,), (rest + self.over_axes(),), ("bytes",), "output"
            )
        return [ArrayLayout("x", (self.devices_ * elements,), (every,), ("bytes",)), out]

    def check(self) -> None:
        if self.bytes % self.element_bytes():
            raise MeshError(
                "bytes", f"{self.bytes} bytes is not a whole number of {self.dtype.value} elements"
            )
        group = self.group_size()
        if self.kind is CollectiveKind.REDUCE_SCATTER and self.elements() % group:
            raise MeshError(
                "bytes",
                f"a reduce-scatter over {group} devices splits each buffer {group} ways: "
                f"{self.elements()} elements do not divide evenly",
            )
        super().check()

    def weak_sizes(self, shape: tuple[int, ...]) -> dict[str, int]:
        # Weak scaling keeps each device's buffer: `bytes` is already per device.
        return {}

    def strong_sizes(self, shape: tuple[int, ...]) -> dict[str, int]:
        # Strong scaling keeps the global payload: fewer devices, bigger buffers.
        return {"bytes": self.bytes * self.devices_ // math.prod(shape)}
