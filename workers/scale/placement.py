"""The placement report of a scale run: shard shapes, memory per device, how each
intermediate lies across the devices, and why each collective is there."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import jax

from workers.catalog.mesh import format_spec
from workers.compiler.analysis import memory_stat, memory_stats
from workers.protocol import (
    CollectiveExplanation,
    DeviceMemory,
    Placement,
    ShardShapes,
)
from workers.scale import hlo_flow
from workers.scale.prepare import Prepared

VIRTUAL_NOTE = (
    "jax-cpu with {n} virtual CPU devices in one process: the sharding, the collectives "
    "and the memory per device are real compiler output; the timings are not hardware "
    "scaling, since every virtual device shares this host's cores."
)

MEMORY_NOTE = (
    "Argument and output bytes are the shards placed on each device. Temp and peak bytes "
    "come from XLA's memory_analysis() of the partitioned program, which every device "
    "runs (SPMD), so they are per device and the same on each."
)


def _slice_text(index: tuple[slice, ...], shape: tuple[int, ...]) -> str:
    parts = []
    for piece, dim in zip(index, shape, strict=True):
        start, stop, _ = piece.indices(dim)
        parts.append(":" if (start, stop) == (0, dim) else f"{start}:{stop}")
    return "[" + ", ".join(parts) + "]"


def shard_shapes(prepared: Prepared) -> list[ShardShapes]:
    """What every device of the mesh holds of each input and of the output."""
    shardings = [*prepared.in_shardings, prepared.out_sharding]
    by_device: dict[int, ShardShapes] = {}
    for position, device in enumerate(prepared.mesh.devices.flat):
        by_device[device.id] = ShardShapes(
            device=device.id,
            process=int(getattr(device, "process_index", 0)),
            position=position,
        )
    for layout, sharding in zip(prepared.layouts, shardings, strict=True):
        placed: Mapping[Any, Any] = sharding.devices_indices_map(layout.shape)
        for device, index in placed.items():
            entry = by_device[device.id]
            entry.shapes[layout.name] = [
                len(range(*piece.indices(dim)))
                for piece, dim in zip(index, layout.shape, strict=True)
            ]
            entry.slices[layout.name] = _slice_text(index, layout.shape)
    return list(by_device.values())  # in mesh order


def _allocator_peak(device: Any) -> int | None:
    if getattr(device, "process_index", 0) != jax.process_index():
        return None
    try:
        stats = device.memory_stats()
    except (RuntimeError, NotImplementedError):
        return None
    peak = stats.get("peak_bytes_in_use") if stats else None
    return int(peak) if isinstance(peak, int) else None


def device_memory(
    prepared: Prepared, shards: list[ShardShapes], compiled: Any
) -> tuple[list[DeviceMemory], str]:
    """Bytes each device needs, and a note on where the figures came from."""
    stats = memory_stats(compiled)
    size = prepared.params.element_bytes()
    names = [layout.name for layout in prepared.layouts]
    inputs, output = names[:-1], names[-1]
    devices = {d.id: d for d in prepared.mesh.devices.flat}
    rows = []
    for shard in shards:
        argument = sum(math.prod(shard.shapes[name]) for name in inputs) * size
        rows.append(
            DeviceMemory(
                device=shard.device,
                argument_bytes=argument,
                output_bytes=math.prod(shard.shapes[output]) * size,
                temp_bytes=memory_stat(stats, "temp_size_in_bytes"),
                peak_bytes=memory_stat(stats, "peak_memory_in_bytes"),
                in_use_peak_bytes=_allocator_peak(devices[shard.device]),
                source="shards placed; temp and peak from memory_analysis()",
            )
        )
    note = MEMORY_NOTE
    compiled_args = memory_stat(stats, "argument_size_in_bytes")
    if compiled_args is not None and rows and compiled_args != rows[0].argument_bytes:
        note += f" XLA's own argument size for the per-device program is {compiled_args:,} bytes."
    return rows, note


def placement_report(prepared: Prepared, compiled: Any, hlo_text: str | None) -> Placement:
    """Everything the run page shows about where a scale run's data lives."""
    mesh = prepared.mesh
    params = prepared.params
    shards = shard_shapes(prepared)
    memory, memory_note = device_memory(prepared, shards, compiled)
    names = [layout.name for layout in prepared.layouts]
    flow = hlo_flow.analyse(hlo_text or "", names[:-1])
    explanations = [
        CollectiveExplanation(
            kind=collective.kind,
            shape=collective.shape,
            bytes=collective.bytes,
            groups=collective.replica_groups,
            source=source,
            jax_op=collective.jax_op,
            because=prepared.workload.explain(params, collective.kind, source),
        )
        for collective, source in flow.collectives
    ]
    if not explanations:
        reason = prepared.workload.no_collective_reason(params)
        if reason:
            explanations.append(CollectiveExplanation(kind="none", shape="", because=reason))
    platform = mesh.devices.flat[0].platform
    note = None
    if platform == "cpu":
        note = VIRTUAL_NOTE.format(n=mesh.size)
        flags = os.environ.get("XLA_FLAGS", "")
        if flags:
            note += f" (XLA_FLAGS={flags})"
    return Placement(
        devices=int(mesh.size),
        mesh_shape=[int(s) for s in mesh.devices.shape],
        axis_names=[str(a) for a in mesh.axis_names],
        axis_types=[str(t).rsplit(".", 1)[-1] for t in mesh.axis_types],
        in_specs={layout.name: format_spec(layout.spec) for layout in prepared.layouts[:-1]},
        out_spec=format_spec(prepared.layouts[-1].spec),
        global_shapes={layout.name: list(layout.shape) for layout in prepared.layouts},
        shards=shards,
        memory=memory,
        memory_note=memory_note,
        intermediates=flow.intermediates(),
        explanations=explanations,
        note=note,
    )
