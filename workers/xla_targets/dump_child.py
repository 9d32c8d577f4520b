"""A compile in a child process, for the dumps a process can switch on only at its start.

libtpu reads its dump options (`LIBTPU_INIT_ARGS`: Mosaic's passes, the LLO passes, the
final VLIW bundles) once, when it starts; Mosaic GPU reads `MOSAIC_GPU_DUMP_*` once, at
its first kernel compile. Neither can be switched on for one compile of a process that
has compiled before, so the run's program is compiled once more in a fresh process with
them set: never the timed compile, and never in the worker's own process.

The program travels as a `jax.export` (the Pallas custom calls `tpu_custom_call` and
`mosaic_gpu_v2` are in its stable list; Triton's is not, and needs no child: XLA's GPU
dump is a per-compile option). The child rebuilds the target's devices, the mesh in the
same device order, places the arguments as the export's shardings say and compiles once.

Run as `python -m workers.xla_targets.dump_child FOLDER`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from workers.compiler.jaxenv import child_jax_environment
from workers.protocol.compiler_options import OptionValue

TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ChildCompile:
    """What the child reported: its own compile, and the whole process's wall time."""

    compile_s: float | None
    wall_s: float


@dataclass(frozen=True)
class Placement:
    """Where the program was lowered: the target, the mesh's device ids in order, its shape
    and axis names (so the export's shardings mean the same devices in the child); and the
    job's compiler options, which every compile of its program takes, the child's too."""

    target: str
    device_ids: tuple[int, ...]
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    options: Mapping[str, OptionValue] = field(default_factory=dict)


def mesh_of(abstract: list[Any]) -> Any | None:
    """The mesh the arguments are placed over (an exported program exported for several
    devices), or None when each sits on one device."""
    for arg in abstract:
        mesh = getattr(getattr(arg, "sharding", None), "mesh", None)
        if mesh is not None and getattr(mesh, "size", 1) > 1:
            return mesh
    return None


def placement_of(
    target: str, mesh: Any | None, device: Any, options: Mapping[str, OptionValue] | None = None
) -> Placement:
    """The placement of a program lowered over `mesh` (a scale workload) or one `device`,
    compiled with `options`."""
    own = dict(options or {})
    if mesh is None:
        return Placement(target, (int(device.id),), (1,), ("device",), own)
    ids = tuple(int(d.id) for d in mesh.devices.flat)
    return Placement(target, ids, tuple(mesh.devices.shape), tuple(mesh.axis_names), own)


def export_program(jitted: Any, abstract: list[Any], platform: str) -> bytes:
    """`jax.export` of a jitted function over abstract arguments, serialized, for one
    platform ("tpu" or "cuda"). Export traces again: call it inside the same lowering
    context as the run's lowering (`workers.pallas.lowering.lowering_for`)."""
    import jax

    exported = jax.export.export(jitted, platforms=[platform])(*abstract)
    return bytes(exported.serialize())


def write_request(exported: bytes, place: Placement, folder: Path) -> None:
    """What a child compiles, as files in `folder`: the program and where it goes."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "program.bin").write_bytes(exported)
    (folder / "job.json").write_text(
        json.dumps(
            {
                "target": place.target,
                "device_ids": list(place.device_ids),
                "mesh_shape": list(place.mesh_shape),
                "axis_names": list(place.axis_names),
                "options": dict(place.options),
            }
        )
    )


def child_environment(env: Mapping[str, str], found: str | None = None) -> dict[str, str]:
    """A dump child's environment: this process's, JAX's settings (off the TPU chip, which
    the runner compiling here may hold: it compiles without the hardware; `found` as
    `workers.compiler.jaxenv.accelerator` says), then `env`."""
    child_env = dict(os.environ)
    child_env.update(child_jax_environment(child_env, found))
    child_env.update(env)
    return child_env


def compile_in_child(
    exported: bytes,
    place: Placement,
    folder: Path,
    env: dict[str, str],
    timeout_s: float = TIMEOUT_S,
) -> ChildCompile:
    """Compile `exported` for `place` in a fresh process whose environment adds `env`;
    RuntimeError with the child's last words when it fails."""
    write_request(exported, place, folder)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workers.xla_targets.dump_child", str(folder)],
            env=child_environment(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the dump compile ran past {timeout_s:g} s and was stopped") from None
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = done.stderr.strip()[-1500:]
        raise RuntimeError(f"the dump compile failed (exit {done.returncode}): {tail}")
    found = re.search(r"compile_s=([\d.]+)", done.stdout)
    return ChildCompile(float(found.group(1)) if found else None, wall)


def compile_request(folder: Path) -> float:
    """The child's side: rebuild the placement, compile the export in `folder` once; the
    compile's seconds."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from workers.protocol import parse_target
    from workers.xla_targets.topology import target_devices

    root = os.environ.get("BOUNDARY_MOSAIC_GPU_CUDA_ROOT")
    if root:  # importing Mosaic GPU sets MOSAIC_GPU_CUDA_ROOT; its SASS dump needs ours
        import jax.experimental.mosaic.gpu

        os.environ["MOSAIC_GPU_CUDA_ROOT"] = root
    job = json.loads((folder / "job.json").read_text())
    exported = jax.export.deserialize(bytearray((folder / "program.bin").read_bytes()))
    by_id = {int(d.id): d for d in target_devices(parse_target(job["target"]))}
    grid = np.array([by_id[i] for i in job["device_ids"]], dtype=object)
    mesh = Mesh(grid.reshape(job["mesh_shape"]), tuple(job["axis_names"]))
    make = cast("Callable[..., Any]", jax.ShapeDtypeStruct)
    if grid.size == 1:  # a one-device program was exported with no mesh at all
        shardings: Any = [jax.sharding.SingleDeviceSharding(grid.flat[0])] * len(exported.in_avals)
    else:
        shardings = exported.in_shardings_jax(mesh)
    args = [
        make(aval.shape, aval.dtype, sharding=sharding)
        for aval, sharding in zip(exported.in_avals, shardings, strict=True)
    ]
    with jax.set_mesh(mesh):
        lowered = jax.jit(exported.call).lower(*args)
    t0 = time.perf_counter()
    lowered.compile(compiler_options=job.get("options") or None)
    return time.perf_counter() - t0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m workers.xla_targets.dump_child FOLDER")
    print(f"compile_s={compile_request(Path(sys.argv[1])):.4f}", flush=True)
