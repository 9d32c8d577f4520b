"""The narrow boundary: a compiled handler that JAX calls through XLA's FFI.

`boundary_scale_shift` computes y = x · scale + shift on float32 arrays. Its handler is
C++ on the CPU (`kernels/ffi/scale_shift_cpu.cc`) and CUDA on an NVIDIA GPU
(`kernels/ffi/scale_shift_cuda.cu`, launched on the stream XLA provides). Each is built
where it runs, on first use, against the FFI headers of the jaxlib in this process, and
the library is cached under a folder named after that jaxlib version: a worker needs a
C++ compiler (and nvcc for the GPU handler); the server needs neither.

`make_scale_shift(scale, shift)` returns the JAX function: a `jax.ffi.ffi_call` with a
declared result shape and dtype, `vmap_method="broadcast_all"` (a batch is one call over
the whole batched array, which is correct for an elementwise handler), and a JVP rule
that refuses differentiation with a clear error.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from workers.compiler.environment import devices_by_platform, jaxlib_version
from workers.compiler.jaxtyped import shape_dtype_struct
from workers.cuda.build import KERNELS_DIR
from workers.cuda.env import check_arch, find_tool, target_arch

TARGET = "boundary_scale_shift"
"""The custom-call target name: what StableHLO and the optimized HLO show."""

FFI_DIR = KERNELS_DIR / "ffi"
HANDLERS: dict[str, tuple[str, str]] = {
    "cpu": ("scale_shift_cpu.cc", "BoundaryScaleShiftCpu"),
    "cuda": ("scale_shift_cuda.cu", "BoundaryScaleShiftCuda"),
}
"""Per platform: the handler's source file and its exported symbol."""

XLA_PLATFORM = {"cpu": "cpu", "cuda": "CUDA"}
"""The platform names register_ffi_target expects."""

CACHE_ENV = "BOUNDARY_FFI_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/boundary/ffi").expanduser()
TIMEOUT_S = 300

_pycapsule: Callable[[Any], Any] = jax.ffi.pycapsule
"""jax.ffi.pycapsule: a ctypes function pointer wrapped for register_ffi_target."""

_ffi_call = cast("Callable[..., Callable[..., jax.Array]]", jax.ffi.ffi_call)
"""jax.ffi.ffi_call: the custom call to a registered target, as a function of arrays."""

_lock = threading.Lock()
_registered: dict[str, Path] = {}
_libraries: list[ctypes.CDLL] = []  # kept alive: XLA holds raw pointers into them


class FfiUnavailable(RuntimeError):
    """The handler cannot be built or registered here; the message says what is missing."""


class NotDifferentiable(TypeError):
    """Raised when something asks for the derivative of the FFI call."""


def cache_dir() -> Path:
    """Where built handlers are kept: $BOUNDARY_FFI_CACHE_DIR or ~/.cache/boundary/ffi."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else DEFAULT_CACHE_DIR


def _compiler(platform: str) -> str:
    if platform == "cpu":
        found = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
        if not found:
            raise FfiUnavailable("the CPU FFI handler needs a C++ compiler (c++ or g++)")
        return found
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise FfiUnavailable("the CUDA FFI handler needs nvcc, and none was found")
    return nvcc


def _command(
    platform: str, compiler: str, source: Path, output: Path, arch: str | None
) -> list[str]:
    include = f"-I{jax.ffi.include_dir()}"
    # -w: the FFI headers trip a few compiler warnings that are not ours to fix.
    if platform == "cpu":
        return [
            compiler,
            "-std=c++17",
            "-O2",
            "-shared",
            "-fPIC",
            "-w",
            include,
            str(source),
            "-o",
            str(output),
        ]
    assert arch is not None
    number = arch.removeprefix("sm_")
    return [
        compiler, "-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC", "-w", include,
        "-gencode", f"arch=compute_{number},code=[sm_{number},compute_{number}]",
        str(source), "-o", str(output),
    ]  # fmt: skip


def _gpu_arch() -> str:
    """The architecture of the GPU JAX runs on (from its compute capability)."""
    for device in devices_by_platform().get("gpu", []):
        capability = getattr(device, "compute_capability", None)
        if capability:
            return check_arch("sm_" + str(capability).replace(".", ""))
    return target_arch()


def library(platform: str, *, root: Path | None = None) -> tuple[Path, bool]:
    """The built handler library for `platform` ('cpu' or 'cuda'), building it if needed.

    Returns the path and whether it was built by this call. The cache key is the jaxlib
    version (its folder), the handler source, the compiler and, for CUDA, the GPU's
    architecture.
    """
    if platform not in HANDLERS:
        raise FfiUnavailable(f"no FFI handler for platform {platform!r}")
    source = FFI_DIR / HANDLERS[platform][0]
    compiler = _compiler(platform)
    arch = _gpu_arch() if platform == "cuda" else None
    digest = hashlib.sha256(source.read_bytes())
    digest.update(f"{compiler}\0{arch}".encode())
    folder = (root or cache_dir()) / f"jaxlib-{jaxlib_version()}"
    output = folder / f"lib{source.stem}-{digest.hexdigest()[:16]}.so"
    if output.is_file():
        return output, False
    folder.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(prefix=f".{source.stem}-", suffix=".so", dir=folder)
    os.close(handle)
    command = _command(platform, compiler, source, Path(scratch), arch)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.unlink(scratch)
        raise FfiUnavailable(f"building the {platform} FFI handler: {exc}") from None
    if done.returncode != 0:
        os.unlink(scratch)
        log = (done.stderr or done.stdout).strip()[-3000:]
        raise FfiUnavailable(f"building the {platform} FFI handler failed:\n{log}")
    os.replace(scratch, output)  # atomic: a concurrent builder sees all of it or none
    return output, True


def ensure_registered(platform: str) -> Path:
    """Build (if needed), load and register the handler for `platform` once per process."""
    with _lock:
        if platform in _registered:
            return _registered[platform]
        path, _ = library(platform)
        loaded = ctypes.CDLL(str(path))
        _libraries.append(loaded)
        capsule = _pycapsule(getattr(loaded, HANDLERS[platform][1]))
        jax.ffi.register_ffi_target(TARGET, capsule, platform=XLA_PLATFORM[platform])
        _registered[platform] = path
        return path


def register_for_this_process() -> list[str]:
    """Register the handler for the CPU and, where JAX sees a GPU, for CUDA.

    A GPU handler that cannot be built is not fatal here (a jax-cpu run needs only the
    CPU one); a jax-gpu run then fails in XLA naming the missing CUDA implementation.
    """
    ensure_registered("cpu")
    done = ["cpu"]
    if devices_by_platform().get("gpu"):
        try:
            ensure_registered("cuda")
            done.append("cuda")
        except FfiUnavailable:
            pass
    return done


def make_scale_shift(scale: float, shift: float) -> Callable[[jax.Array], jax.Array]:
    """y = x · scale + shift through the FFI handler, for float32 `x` of any shape."""
    attributes = {"scale": np.float32(scale), "shift": np.float32(shift)}

    @jax.custom_jvp
    def scale_shift(x: jax.Array) -> jax.Array:
        if x.dtype != jnp.float32:
            raise TypeError(f"{TARGET} takes float32, not {x.dtype}")
        call = _ffi_call(TARGET, shape_dtype_struct(x.shape, x.dtype), vmap_method="broadcast_all")
        result: jax.Array = call(x, **attributes)
        return result

    def refuse(primals: Any, tangents: Any) -> Any:
        raise NotDifferentiable(
            f"{TARGET} is a compiled FFI handler with no derivative rule: differentiation "
            "through it is not supported (write a custom_vjp around it to supply one)"
        )

    scale_shift.defjvp(refuse)
    return scale_shift
