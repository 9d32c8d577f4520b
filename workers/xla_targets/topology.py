"""The devices of a target as the compiler sees them, and which compiler that is.

A TPU slice's devices come from libtpu's topology of that slice; a GPU host's from JAX's
CUDA plugin, given the GPU model's target description (`gpu/*.txtpb`, from openxla/xla
under Apache-2.0, each with its header) and the topology `1x1xN` (one slice of one host
with N GPUs). Both work under JAX_PLATFORMS=cpu, which `workers.compiler.jaxenv` sets on machines
without accelerators, and neither opens a device.
"""

from __future__ import annotations

import functools
import importlib.metadata
from pathlib import Path
from typing import Any

from workers.protocol import Platform, Target, TargetModel

GPU_DESCRIPTIONS = Path(__file__).resolve().parent / "gpu"
"""The GPU target descriptions (stream_executor.GpuTargetConfigProto, text format)."""

_GPU_FILES: dict[TargetModel, str] = {
    TargetModel.B200: "b200.txtpb",
    TargetModel.H100: "h100_sxm.txtpb",
    TargetModel.H200: "h200.txtpb",
}

_COMPILERS: dict[Platform, tuple[str, str]] = {
    Platform.TPU: ("libtpu", "libtpu"),
    Platform.GPU: ("JAX CUDA plugin (XLA:GPU)", "jax-cuda13-plugin"),
}
"""Per platform: the compiler's name in a run, and the package that carries it."""


class TargetUnavailable(RuntimeError):
    """This installation cannot compile for the target (its compiler is missing)."""


def gpu_description(model: TargetModel) -> str:
    """The target description text of a GPU model."""
    return (GPU_DESCRIPTIONS / _GPU_FILES[model]).read_text(encoding="utf-8")


def compiler_of(target: Target) -> tuple[str, str | None]:
    """(compiler name, its installed version or None) for a target's platform."""
    name, package = _COMPILERS[target.platform]
    try:
        return name, importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return name, None


@functools.cache
def target_devices(target: Target) -> tuple[Any, ...]:
    """The target's devices, in the topology's order (kept per process: building a
    topology starts the compiler's client once)."""
    return build_devices(target)


def build_devices(target: Target) -> tuple[Any, ...]:
    """The target's devices from a topology built now, kept by no one (a capacity reading
    of a 6,144-chip slice need not hold its client for the life of the process)."""
    from jax.experimental import topologies

    name, version = compiler_of(target)
    if version is None:
        _, package = _COMPILERS[target.platform]
        raise TargetUnavailable(
            f"target: compiling for {target.id} needs {name}, and {package} is not installed "
            "(pip install -e '.[server]' installs it on Linux)"
        )
    if target.platform is Platform.TPU:
        options: dict[str, Any] = {}
        bounds = target.host_bounds()
        if bounds is not None:  # slices under one host's 4 chips spell their host bounds
            options["chips_per_host_bounds"] = bounds
        topology = topologies.get_topology_desc(topology_name=target.id, platform="tpu", **options)
    else:
        topology = topologies.get_topology_desc(
            platform="cuda",
            target_config=gpu_description(target.model),
            topology=f"1x1x{target.count}",
        )
    devices = tuple(topology.devices)
    if len(devices) != target.count:
        raise TargetUnavailable(
            f"target: the compiler's topology for {target.id} has {len(devices)} devices, "
            f"not {target.count}"
        )
    return devices


def available_targets() -> list[str]:
    """Every target id this process can compile for without the hardware.

    Detected, not assumed: one small topology per compiler is built (a v5e chip through
    libtpu, one B200 through the CUDA plugin); a compiler that is missing or fails to
    start leaves its targets out.
    """
    from workers.protocol import TARGET_IDS, parse_target

    found: list[str] = []
    for probe in ("v5e:1x1", "b200:1"):
        target = parse_target(probe)
        try:
            target_devices(target)
        except Exception:  # noqa: BLE001 - any failure to start a compiler means: not offered
            continue
        found += [t for t in TARGET_IDS if parse_target(t).platform is target.platform]
    return found
