"""The run page's Placement section: where a scale run's data lives, and its series.

Built from the run's `placement` and `scaling` (workers.protocol); None for runs of
single-device workloads, so the section is simply absent.
"""

from __future__ import annotations

from typing import Any

from app.pages.runs.plots import format_seconds
from app.pages.runs.scaling_plot import MODE_LABELS, scaling_svg
from workers.protocol import RunResult
from workers.protocol.sizes import byte_text


def _shape(shape: list[int]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def placement_view(run: RunResult) -> dict[str, Any] | None:
    """Rows for the Placement section; None when the run has no mesh."""
    placement, series = run.placement, run.scaling
    if placement is None and series is None:
        return None
    view: dict[str, Any] = {"placement": placement, "series": series}
    if placement is not None:
        names = list(placement.global_shapes)
        view["arrays"] = [
            {
                "name": name,
                "global": _shape(placement.global_shapes[name]),
                "spec": placement.in_specs.get(name, placement.out_spec),
            }
            for name in names
        ]
        view["shards"] = [
            {
                "device": shard.device,
                "position": shard.position,
                "process": shard.process,
                "cells": [
                    f"{_shape(shard.shapes[name])} at {shard.slices.get(name, '')}"
                    if name in shard.shapes
                    else "—"
                    for name in names
                ],
            }
            for shard in placement.shards
        ]
        view["memory"] = [
            {
                "device": m.device,
                "argument": byte_text(m.argument_bytes, exact=True),
                "output": byte_text(m.output_bytes, exact=True),
                "temp": byte_text(m.temp_bytes, exact=True),
                "peak": byte_text(m.peak_bytes, exact=True),
                "allocator": byte_text(m.in_use_peak_bytes, exact=True),
            }
            for m in placement.memory
        ]
        view["mesh"] = " × ".join(
            f"{name}={size}"
            for name, size in zip(placement.axis_names, placement.mesh_shape, strict=False)
        )
    if series is not None:
        view["chart"] = scaling_svg(series)
        view["points"] = [
            {
                "mode": MODE_LABELS.get(p.mode, p.mode),
                "devices": p.devices,
                "mesh": "×".join(map(str, p.mesh_shape)),
                "global": ", ".join(f"{k} {_shape(v)}" for k, v in p.global_shapes.items()),
                "per_device": ", ".join(f"{k} {_shape(v)}" for k, v in p.per_device_shapes.items()),
                "median": format_seconds(p.median_s) if p.median_s is not None else "withheld",
                "rounds": len(p.samples_s),
                "collectives": ", ".join(p.collectives) or "none",
                "correct": p.correct,
                "note": p.note,
            }
            for p in series.points
        ]
    return view
