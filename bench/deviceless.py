"""A deviceless compile of an exported program, outside Boundary: plain JAX only.

The acceptance checkers (bench/memory_truth.py, bench/fit_confirm.py) confirm what the
server answered by compiling the same `.jaxexport` file here, with nothing of Boundary's
but the GPU target descriptions (`workers/xla_targets/gpu/*.txtpb`, data: the
`stream_executor.GpuTargetConfigProto` XLA's own repository has for each GPU):

    exp = jax.export.deserialize(data)
    devices = jax.experimental.topologies.get_topology_desc(...).devices   # the target's
    args = ShapeDtypeStructs of exp.in_avals, placed on those devices
    jax.jit(exp.call).lower(*args, **kwargs).compile().memory_analysis()

A symbolic dimension takes the value given; an artifact exported for N devices is placed
on the target's first N devices in a mesh with the export's axis names and sizes (read
from the module's `sdy.mesh`), each argument with the export's own sharding
(`exp.in_shardings_jax`), replicated where the export left it open.

Import this module only after `environment()` has run (before jax is imported).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GPU_DESCRIPTIONS = {
    "h100": ROOT / "workers" / "xla_targets" / "gpu" / "h100_sxm.txtpb",
    "h200": ROOT / "workers" / "xla_targets" / "gpu" / "h200.txtpb",
    "b200": ROOT / "workers" / "xla_targets" / "gpu" / "b200.txtpb",
}
_SDY_MESH = re.compile(r"sdy\.mesh\s+@\w+\s*=\s*<\[([^\]]*)\]")
_SDY_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_OUT_OF_HBM = (
    "Ran out of memory in memory space hbm",
    "Ran out of memory on HBM",
    "exceeds available HBM",
    "CompileTimeHbmOom",
    "Exceeded hbm capacity",
)
"""How libtpu words a refusal of a program over its HBM (FACTS.md, libtpu 0.0.42)."""


def environment() -> None:
    """What a process without accelerators needs before `import jax` (FACTS.md)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TPU_LOG_DIR", "disabled")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")


@cache
def devices_of(target: str) -> tuple[Any, ...]:
    """`v6e:1x1`, `v6e:2x4`, `h100:8`, `b200:1` → the compiler's devices for it."""
    from jax.experimental import topologies

    model, _, shape = target.lower().partition(":")
    if model == "v6e":
        x, y = (int(n) for n in shape.split("x"))
        extra: dict[str, Any] = {}
        if x * y < 4:  # slices under one host's 4 chips need their host bounds (FACTS.md)
            extra["chips_per_host_bounds"] = (x, y, 1)
        topology = topologies.get_topology_desc(
            topology_name=f"v6e:{x}x{y}", platform="tpu", **extra
        )
    else:
        topology = topologies.get_topology_desc(
            platform="cuda",
            target_config=GPU_DESCRIPTIONS[model].read_text(encoding="utf-8"),
            topology=f"1x1x{int(shape)}",
        )
    return tuple(topology.devices)


def _concrete(dim: Any, dims: dict[str, int]) -> int:
    """A shape's dimension at the given values of the symbolic ones."""
    if isinstance(dim, int):
        return dim
    scope = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": max, "min": min}
    value = eval(str(dim), {"__builtins__": {}}, {**scope, **dims})
    return int(value)


def _mesh(exp: Any, devices: tuple[Any, ...]) -> Any:
    import jax
    import numpy as np

    found = _SDY_MESH.search(exp.mlir_module())
    if found is None:
        raise ValueError(f"exported for {exp.nr_devices} devices, but its module names no mesh")
    axes = _SDY_AXIS.findall(found[1])
    names, sizes = tuple(a for a, _ in axes), tuple(int(s) for _, s in axes)
    grid = np.array(list(devices[: exp.nr_devices]), dtype=object).reshape(sizes)
    return jax.sharding.Mesh(grid, names)


@dataclass(frozen=True)
class Outcome:
    """One compile: memory_analysis()'s figures, or libtpu's out-of-HBM refusal."""

    argument: int | None = None
    output: int | None = None
    temp: int | None = None
    alias: int | None = None
    peak: int | None = None
    refused: str | None = None
    seconds: float = 0.0

    def allocations(self) -> int:
        """Arguments + outputs + temporaries − aliased bytes (a donated argument once)."""
        return (self.argument or 0) + (self.output or 0) + (self.temp or 0) - (self.alias or 0)


def compile_file(data: bytes, target: str, dims: dict[str, int] | None = None) -> Outcome:
    """Compile the serialized export `data` for `target` at `dims`, without the hardware."""
    import time

    import jax

    exp = jax.export.deserialize(bytearray(data))
    devices = devices_of(target)
    if exp.nr_devices > len(devices):
        raise ValueError(f"exported for {exp.nr_devices} devices; {target} has {len(devices)}")
    mesh = _mesh(exp, devices) if exp.nr_devices > 1 else None
    if mesh is None:
        shardings: list[Any] = [jax.sharding.SingleDeviceSharding(devices[0])] * len(exp.in_avals)
    else:
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        shardings = [s or replicated for s in exp.in_shardings_jax(mesh)]
    leaves = [
        jax.ShapeDtypeStruct(
            tuple(_concrete(d, dims or {}) for d in aval.shape), aval.dtype, sharding=sharding
        )
        for aval, sharding in zip(exp.in_avals, shardings, strict=True)
    ]
    args, kwargs = jax.tree.unflatten(exp.in_tree, leaves)
    started = time.perf_counter()
    try:
        if mesh is None:
            lowered = jax.jit(exp.call).lower(*args, **kwargs)
        else:
            with jax.set_mesh(mesh):
                lowered = jax.jit(exp.call).lower(*args, **kwargs)
        compiled = lowered.compile()
    except Exception as exc:
        text = str(exc)
        if any(mark in text for mark in _OUT_OF_HBM):
            return Outcome(refused=text, seconds=time.perf_counter() - started)
        raise
    seconds = time.perf_counter() - started
    ma = compiled.memory_analysis()
    return Outcome(
        argument=int(ma.argument_size_in_bytes),
        output=int(ma.output_size_in_bytes),
        temp=int(ma.temp_size_in_bytes),
        alias=int(ma.alias_size_in_bytes),
        peak=int(ma.peak_memory_in_bytes),
        seconds=seconds,
    )
