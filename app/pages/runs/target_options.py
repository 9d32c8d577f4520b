"""The run form's targets: those that combine with a workload on a path (the catalog's
rules), each saying whether a connected worker has its hardware or compiles for it, its
size in chips and devices and what one device may hold; and the notes beside them."""

from __future__ import annotations

from dataclasses import dataclass

from app.dispatch.requirements import has_real
from workers.catalog import WORKLOADS, CatalogError
from workers.catalog.mesh import MeshParams
from workers.catalog.target_rules import apply_target
from workers.protocol import (
    TARGET_IDS,
    Capabilities,
    JobSpec,
    PathId,
    Target,
    gpu_usable_bytes,
    merge_capacities,
    parse_target,
)
from workers.protocol.sizes import byte_text


@dataclass(frozen=True)
class TargetOption:
    """A target the run form offers for a path, and how a connected worker would take it."""

    id: str
    label: str
    real: bool
    """A connected worker has real devices of this model, enough of them."""
    offered: bool
    """Some connected worker can take a compile-only job for it."""


def target_options(workload: str, path: str, workers: list[Capabilities]) -> list[TargetOption]:
    """The targets that combine with `workload` on `path` (the catalog's rules), each marked
    "compiled without the hardware" unless a connected worker has such devices, with what
    one device may hold (libtpu's usable bytes, as a worker read them; JAX's GPU share)."""
    capacities = merge_capacities(caps.capacities for caps in workers)
    options = []
    for target_id in TARGET_IDS:
        target = parse_target(target_id)
        if PathId(path) not in target.chip.paths:
            continue
        try:
            apply_target(
                JobSpec.model_validate({"workload": workload, "path": path, "target": target_id})
            )
        except (CatalogError, ValueError):
            continue  # e.g. b200:8 for a one-device workload
        real = any(has_real(caps, target) for caps in workers)
        offered = real or any(target_id in caps.targets for caps in workers)
        how = "on real devices" if real else "compiled without the hardware"
        if not offered:
            how += "; no connected worker compiles for it"
        usable = capacities.get(target_id) or gpu_usable_bytes(target.chip)
        held = f", {byte_text(usable)} usable a device" if usable else ""
        label = f"{target_id} — {target.chip.name}, {size_words(target)}{held} ({how})"
        options.append(TargetOption(target_id, label, real, offered))
    return options


def size_words(target: Target) -> str:
    """A target's size: '8 chips', '4 chips, 8 devices' (two TensorCores a chip), '2 GPUs'."""
    unit = "chip" if target.grid else "GPU"
    words = f"{target.chips} {unit}{'s' if target.chips > 1 else ''}"
    if target.count != target.chips:
        words += f", {target.count} devices"
    return words


def wider_targets_note(workload: str, path: str, offered: list[TargetOption]) -> str | None:
    """What a one-device workload's target list leaves out, and which workloads take it:
    a slice or several GPUs need a workload that spans devices."""
    wider = [
        t
        for t in TARGET_IDS
        if PathId(path) in parse_target(t).chip.paths and parse_target(t).count > 1
    ]
    if not wider or any(o.id in wider for o in offered):
        return None
    spanning = ", ".join(
        name for name, cls in WORKLOADS.items() if issubclass(cls, MeshParams) and name != workload
    )
    many = "slices of several chips" if path == PathId.JAX_TPU.value else "several GPUs"
    return (
        f"{workload} runs on one device, so only one-device targets are offered; "
        f"{many} ({wider[0]} … {wider[-1]}) take a workload that spans devices: {spanning}."
    )


def target_note(target: str, real: bool) -> str:
    """Why a target makes the form compile only."""
    phrase = parse_target(target).hardware_phrase()
    if real:
        return (
            f"Target {target}: a connected worker has the hardware, so execute may be ticked "
            "too; compile alone shows what the compiler produced."
        )
    return (
        f"Target {target} implies compile only: no connected worker has the hardware "
        f"({phrase} would be needed to run it), so the compiler builds the program without "
        "it. The run shows the IR, what XLA chose and memory per device; there is no time, "
        "no speed and no correctness check. Ticking execute queues a job that waits for "
        "such a worker."
    )
