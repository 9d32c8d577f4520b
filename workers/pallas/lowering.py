"""What lowering and compiling a Pallas kernel needs beyond `jit(f).lower()`.

- Mosaic GPU asks the device for its compute capability (`_infer_arch`); the abstract
  device of a deviceless target has none, so it answers (9, 0) and a B200 kernel would be
  lowered as for Hopper while XLA emits sm_100a. `lowering_for` pins the target's answer
  around a lowering (and around `jax.export`, which traces again). jit caches lowerings
  per function object, so the first lowering of a function must happen inside it.
- jax's bundled Mosaic GPU matmuls read the SM count from the abstract mesh: lowering
  happens inside `jax.set_mesh` over the program's devices.
- Mosaic GPU compiles one GPU architecture per process: after an H100 kernel, a B200 one
  fails in ptxas ("SM version specified by .target is higher than default SM version
  assumed"), and the other way round. `claim_architecture` records the first one this
  process compiled; a job for another is run in a fresh process (`workers.run.isolated`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from workers.catalog.kernels import KernelChoice
from workers.catalog.pallas_limits import Backend, Gpu

_compiled_arch: int | None = None
"""The compute capability (90, 100) this process compiled Mosaic GPU kernels for, if any."""


def uses_mosaic_gpu(choice: KernelChoice | None) -> bool:
    return choice is not None and choice.backend is Backend.MOSAIC_GPU


def arch_conflict(choice: KernelChoice | None) -> int | None:
    """The architecture this process is tied to, when `choice` needs another; else None."""
    if not uses_mosaic_gpu(choice) or _compiled_arch is None:
        return None
    assert choice is not None and choice.gpu is not None
    return _compiled_arch if _compiled_arch != choice.gpu.sm else None


def claim_architecture(choice: KernelChoice | None) -> None:
    """Record that this process now compiles Mosaic GPU kernels for `choice`'s GPU."""
    global _compiled_arch  # noqa: PLW0603 - a fact about the whole process, set once
    if uses_mosaic_gpu(choice) and _compiled_arch is None:
        assert choice is not None and choice.gpu is not None
        _compiled_arch = choice.gpu.sm


@contextlib.contextmanager
def lowering_for(choice: KernelChoice | None, mesh: Any | None, device: Any) -> Iterator[None]:
    """The context a Pallas program lowers in (a no-op for anything but Mosaic GPU): over
    the program's `mesh`, or a mesh of its one `device`."""
    if not uses_mosaic_gpu(choice):
        yield
        return
    assert choice is not None and choice.gpu is not None
    import jax
    import numpy as np
    from jax.experimental.mosaic.gpu import core as mgpu_core
    from jax.sharding import Mesh

    sm = choice.gpu.sm
    saved = mgpu_core._infer_arch
    mgpu_core._infer_arch = lambda: (sm // 10, sm % 10)
    if mesh is None:
        mesh = Mesh(np.array([device]), ("device",))
    try:
        with jax.set_mesh(mesh):
            yield
    finally:
        mgpu_core._infer_arch = saved


def real_gpu(device: Any) -> Gpu | None:
    """The GPU a real device is, by its compute capability ("9.0" → sm 90)."""
    capability = getattr(device, "compute_capability", None)
    if not capability:
        return None
    major, _, minor = str(capability).partition(".")
    if not major.isdigit():
        return None
    return Gpu(str(getattr(device, "device_kind", "GPU")), int(major) * 10 + int(minor or 0))
