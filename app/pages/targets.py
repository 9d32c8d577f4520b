"""Every target as data: what it is, what one device may hold (`usable_bytes`) with the
published HBM beside it, the vendor's peak rates, bandwidth and clock, and which
connected workers compile for it or could run it. `GET /api/v1/targets` answers this,
and MCP's list_targets reads it.

A TPU target's usable bytes are what libtpu makes available to a program on it, as the
connected workers read them from their libtpu (`Capabilities.capacities`); until one
has, they are not reported. A GPU's are JAX's default share of its published HBM.
"""

from __future__ import annotations

from typing import Any

from app.dispatch import Dispatcher
from app.dispatch.requirements import has_real
from workers.protocol import (
    CHIPS,
    GPU_USABLE_SOURCE,
    TARGET_IDS,
    Capabilities,
    Chip,
    Platform,
    gpu_usable_bytes,
    merge_capacities,
    parse_target,
)

UNREAD = (
    "not reported yet: no connected worker has read it from its libtpu (a worker reads "
    "each TPU target's figure once, while idle, about a second each)"
)


def chip_public(chip: Chip) -> dict[str, Any]:
    """A device model's published figures, each with its source and the vendor's label."""
    return {
        "model": chip.model.value,
        "name": chip.name,
        "platform": chip.platform.value,
        "paths": [p.value for p in chip.paths],
        "hbm_bytes_per_chip": chip.hbm_bytes,
        "hbm_label": chip.hbm_label,
        "hbm_source": chip.source,
        "devices_per_chip": chip.devices_per_chip,
        "bandwidth_bytes_per_s": chip.bandwidth_bytes_per_s,
        "bandwidth_label": chip.bandwidth_label or None,
        "peaks": [
            {"dtype": p.dtype, "per_s": p.per_s, "label": p.label, "source": p.source}
            for p in chip.peaks
        ],
        "clock_hz": chip.clock.hz if chip.clock is not None else None,
        "clock": (
            {"how": chip.clock.how, "sources": list(chip.clock.sources)}
            if chip.clock is not None
            else {"missing": chip.clock_missing}
        ),
        "shapes_source": chip.shapes_source,
    }


def target_row(
    target_id: str, workers: list[tuple[str, Capabilities]], capacities: dict[str, int]
) -> dict[str, Any]:
    """One target: its size, what a device may hold beside the published HBM, and the
    workers (`(name, capabilities)`) that compile for it or have its chips."""
    target = parse_target(target_id)
    chip = target.chip
    if chip.platform is Platform.TPU:
        usable = capacities.get(target_id)
        source = "libtpu, read by a connected worker by compiling" if usable else UNREAD
    else:
        usable, source = gpu_usable_bytes(chip), GPU_USABLE_SOURCE
    return {
        "id": target.id,
        "model": chip.model.value,
        "chip": chip.name,
        "path": target.path.value,
        "devices": target.count,
        "chips": target.chips,
        "grid": list(target.grid) if target.grid is not None else None,
        "usable_bytes": usable,
        "usable_source": source,
        "hbm_bytes": chip.device_hbm_bytes,
        "hbm_label": chip.device_hbm_label,
        "compiled_by": [name for name, caps in workers if target_id in caps.targets],
        "executed_by": [name for name, caps in workers if has_real(caps, target)],
    }


def targets_public(dispatcher: Dispatcher) -> dict[str, Any]:
    """Every target, and the chips' published figures, as the API answers them."""
    entries = sorted(dispatcher.recent_workers(), key=lambda w: w.registered_at, reverse=True)
    workers = [(w.name or w.id, w.capabilities) for w in entries]
    capacities = merge_capacities(caps.capacities for _, caps in workers)
    data = [target_row(t, workers, capacities) for t in TARGET_IDS]
    return {
        "data": data,
        "count": len(data),
        "chips": [chip_public(chip) for chip in CHIPS.values()],
    }
