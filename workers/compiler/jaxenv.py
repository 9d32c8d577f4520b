"""The environment every process that imports jax starts with. No jax here.

The default install carries libtpu and JAX's CUDA plugin so that any machine can compile
for TPU and GPU targets. On a machine without those devices the plugins must not try to
start: `import jax` then logs TPU and cuDNN start-up errors, and the CUDA topology used
for deviceless compiles fails. So, before jax is imported:

- `JAX_PLATFORMS` is `cpu` unless a real GPU or TPU is found (then `cuda,cpu` or
  `tpu,cpu`). A device is found by its device files, without importing jax: NVIDIA GPUs
  by `/dev/nvidia0`…, TPUs by `/dev/accel*` (v4 and older) or `/dev/vfio/N` (v5e, v6e).
  `BOUNDARY_JAX_PLATFORMS` overrides the choice; an empty value leaves it to JAX.
- `TPU_LOG_DIR` is `disabled` (libtpu would otherwise write logs under /tmp/tpu_logs in
  every process that compiles for a TPU target), unless it is already set.
- `ALLOW_MULTIPLE_LIBTPU_LOAD=1`: two processes compiling TPU targets at once (two
  workers, a worker and `boundary run`) both need libtpu, which otherwise takes a lock.
- Where no TPU is found, `TPU_SKIP_MDS_QUERY=1` and `TPU_WORKER_HOSTNAMES=localhost`:
  libtpu then neither asks a cloud metadata server what it runs on nor logs an error
  about worker hostnames it cannot find. The compiled program is the same either way.
- One holder of a TPU chip: a second process that opens a chip already held fails at once
  ("Internal error when accessing libtpu multi-process lockfile") and does not fall back
  to the CPU. So on a TPU host only a worker's chip runner opens it (`holds_chip`), and
  every other jax process a worker, a runner or `serve` starts runs chip-free
  (`chipless_environment`): `JAX_PLATFORMS=cpu` and `BOUNDARY_JAX_PLATFORMS=cpu` (so that
  its own children, which apply this module again, stay off the chip too),
  `ALLOW_MULTIPLE_LIBTPU_LOAD=1` and `TPU_LOG_DIR=disabled` (libtpu still loads, to compile
  for TPU targets without the hardware), and libtpu's settings for a machine without TPUs
  (it asks no metadata server: such a process opens no network connection).
- The nvidia-cuda-nvcc wheel's `bin` folder first on `PATH`: Mosaic GPU's compile runs
  `ptxas` from PATH (else /usr/local/cuda/bin), ignoring every other setting, and the
  SASS of GPU targets is assembled with the same ptxas. A machine with an older CUDA on
  PATH would otherwise build Mosaic GPU kernels with that one (on this project's machine
  CUDA 13.0 gave a B200 matmul 104 registers where the wheel's 13.5 gives 89), and one
  with none could not build them at all.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping, MutableMapping

PLATFORMS_ENV = "BOUNDARY_JAX_PLATFORMS"
"""Overrides the JAX platforms chosen from the devices found (e.g. `cpu`, `cuda,cpu`)."""

_NO_TPU = {"TPU_SKIP_MDS_QUERY": "1", "TPU_WORKER_HOSTNAMES": "localhost"}
"""libtpu's settings for a machine without TPUs, where it only compiles."""

_GPU_FILES = ("/dev/nvidia[0-9]*",)
_TPU_FILES = ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


def _present(patterns: tuple[str, ...]) -> bool:
    return any(glob.glob(pattern) for pattern in patterns)


def accelerator() -> str | None:
    """'tpu' or 'gpu' when this machine has such a device (by its device files), else None."""
    if _present(_TPU_FILES):
        return "tpu"
    if _present(_GPU_FILES):
        return "gpu"
    return None


def nvidia_cuda_root() -> str | None:
    """The pip `nvidia/cu13` folder whose `bin` holds ptxas (nvidia-cuda-nvcc), or None."""
    for entry in sys.path:
        for match in sorted(glob.glob(os.path.join(entry, "nvidia", "cu1*"))):
            if os.path.isfile(os.path.join(match, "bin", "ptxas")):
                return match
    return None


def _wheel_tools_first(path: str) -> str | None:
    """`path` with the CUDA wheel's bin folder first, or None when it already is (or no
    wheel is installed)."""
    root = nvidia_cuda_root()
    if root is None:
        return None
    folder = os.path.join(root, "bin")
    parts = [p for p in path.split(os.pathsep) if p]
    if parts[:1] == [folder]:
        return None
    return os.pathsep.join([folder, *(p for p in parts if p != folder)])


def jax_environment(environ: Mapping[str, str], found: str | None = None) -> dict[str, str]:
    """The variables a jax process needs, given its current environment `environ`.

    `found` is what `accelerator()` reports (looked up when not given). Values already
    in `environ` win, except that BOUNDARY_JAX_PLATFORMS always decides JAX_PLATFORMS.
    """
    found = accelerator() if found is None else found
    wanted: dict[str, str] = {}
    override = environ.get(PLATFORMS_ENV)
    if override is not None:
        wanted["JAX_PLATFORMS"] = override
    elif "JAX_PLATFORMS" not in environ:
        wanted["JAX_PLATFORMS"] = {"tpu": "tpu,cpu", "gpu": "cuda,cpu"}.get(found or "", "cpu")
    if "TPU_LOG_DIR" not in environ:
        wanted["TPU_LOG_DIR"] = "disabled"
    if "ALLOW_MULTIPLE_LIBTPU_LOAD" not in environ:
        wanted["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    if found != "tpu":
        for name, value in _NO_TPU.items():
            if name not in environ:
                wanted[name] = value
    path = _wheel_tools_first(environ.get("PATH", ""))
    if path is not None:
        wanted["PATH"] = path
    return wanted


CHIPLESS = {
    PLATFORMS_ENV: "cpu",
    "JAX_PLATFORMS": "cpu",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    "TPU_LOG_DIR": "disabled",
}
"""What a jax process beside the chip's holder is given, whatever its environment says."""


def holds_chip(environ: Mapping[str, str], found: str | None = None) -> bool:
    """Whether a jax process started with `environ` opens this machine's TPU chip: on a
    TPU host, when the JAX_PLATFORMS it gets names tpu, or none (JAX then picks the TPU)."""
    found = accelerator() if found is None else found
    if found != "tpu":
        return False
    platforms = {**environ, **jax_environment(environ, found)}.get("JAX_PLATFORMS", "")
    names = [name.strip() for name in platforms.split(",") if name.strip()]
    return not names or "tpu" in names


def chipless_environment(environ: Mapping[str, str], found: str | None = None) -> dict[str, str]:
    """The variables of a jax process that must never open this machine's TPU chip (see
    the module's docstring), given its environment `environ`."""
    wanted = jax_environment({**environ, **CHIPLESS}, found)
    wanted.update(CHIPLESS)
    for name, value in _NO_TPU.items():
        if name not in environ:
            wanted[name] = value
    return wanted


def child_jax_environment(environ: Mapping[str, str], found: str | None = None) -> dict[str, str]:
    """The variables of a jax process that a runner starts for one compile or job beside
    itself (a dump child, an isolated job), given its environment `environ`: where that
    would open this machine's TPU chip, which the runner may hold, the chipless ones."""
    if holds_chip(environ, found):
        return chipless_environment(environ, found)
    return jax_environment(environ, found)


def apply_jax_environment(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set what `jax_environment` asks for in `environ` (default: this process's); return it.

    Call it before jax is imported: JAX reads these once, when its backends start.
    """
    target = os.environ if environ is None else environ
    wanted = jax_environment(target)
    target.update(wanted)
    return wanted
