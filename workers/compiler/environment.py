"""What this process runs on: its devices, the paths they allow, and the run environment.

Everything here is detected from the running JAX, never assumed from configuration:
JAX falls back to the CPU silently when an accelerator fails to start, and a run
labelled with the wrong device would be worse than no run.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import sys
from datetime import UTC, datetime
from typing import Any

import jax
import jax.extend.backend

from workers.compiler.jaxtyped import config_value
from workers.protocol import CacheEvents, CachePolicy, Environment, PathId, Platform

PLATFORM_PATH: dict[str, PathId] = {
    Platform.CPU.value: PathId.JAX_CPU,
    Platform.GPU.value: PathId.JAX_GPU,
    Platform.TPU.value: PathId.JAX_TPU,
}
"""The JAX path each device platform serves."""

_DEVICE_FACTS: tuple[str, ...] = ("compute_capability", "core_count", "num_cores")
"""Device attributes worth recording when a backend offers them."""

_CUDA_VERSION_GETTERS: tuple[str, ...] = (
    "cuda_driver_get_version",
    "cuda_runtime_get_version",
    "cudnn_get_version",
    "cublas_get_version",
    "cupti_get_version",
    "cufft_get_version",
    "cusolver_get_version",
    "cusparse_get_version",
)
"""Version getters that CUDA builds of jaxlib expose; absent ones are skipped."""


def devices_by_platform() -> dict[str, list[Any]]:
    """Every device of every backend that started in this process, by platform name."""
    found: dict[str, list[Any]] = {}
    for client in jax.extend.backend.backends().values():
        for device in client.devices():
            found.setdefault(device.platform, []).append(device)
    return found


def describe_devices(found: dict[str, list[Any]] | None = None) -> str:
    """A short human list of the devices present, e.g. 'cpu ×1 (cpu)'."""
    found = devices_by_platform() if found is None else found
    if not found:
        return "no devices"
    parts = []
    for name, devices in sorted(found.items()):
        kinds = sorted({str(d.device_kind) for d in devices})
        parts.append(f"{name} ×{len(devices)} ({', '.join(kinds)})")
    return ", ".join(parts)


def available_paths() -> list[PathId]:
    """The JAX paths this process can run, from the devices actually present.

    The `cuda` path is not a JAX path: the runner adds it when a CUDA compiler answers.
    """
    found = devices_by_platform()
    return [path for name, path in PLATFORM_PATH.items() if found.get(name)]


@functools.cache
def jaxlib_version() -> str:
    """The installed jaxlib's version (read once: package metadata is slow to query)."""
    return importlib.metadata.version("jaxlib")


@functools.cache
def host_cpu() -> str | None:
    """The host CPU model as the operating system names it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


@functools.cache
def _backend_facts(platform_name: str) -> dict[str, str]:
    """Library versions a backend reports beyond the basics (CUDA builds report several)."""
    facts: dict[str, str] = {}
    try:
        from jax._src.lib import cuda_versions
    except ImportError:
        return facts
    if cuda_versions is None or platform_name != Platform.GPU.value:
        return facts
    for getter in _CUDA_VERSION_GETTERS:
        function = getattr(cuda_versions, getter, None)
        if function is None:
            continue
        try:
            facts[getter.removesuffix("_get_version")] = str(function())
        except (RuntimeError, TypeError, OSError) as exc:
            facts[getter.removesuffix("_get_version")] = f"unavailable ({type(exc).__name__})"
    return facts


def device_facts(device: Any) -> dict[str, str]:
    """Backend-specific facts about `device`: attributes and library versions it offers."""
    facts = dict(_backend_facts(device.platform))
    for name in _DEVICE_FACTS:
        value = getattr(device, name, None)
        if value is not None:
            facts[name] = str(value)
    try:
        memory = device.memory_stats()
    except (RuntimeError, NotImplementedError):
        memory = None
    if memory and "bytes_limit" in memory:
        facts["memory_bytes_limit"] = str(memory["bytes_limit"])
    return facts


def detect_environment(
    device: Any,
    cache: CachePolicy,
    cache_events: CacheEvents | None = None,
    devices: list[Any] | None = None,
) -> Environment:
    """The environment record of a run on `device` (one of `devices`, if given)."""
    peers = devices if devices is not None else devices_by_platform().get(device.platform, [])
    client = device.client
    precision = config_value("jax_default_matmul_precision")
    return Environment(
        platform=device.platform,
        device_kind=str(device.device_kind),
        device_count=len(peers) or 1,
        jax_version=jax.__version__,
        jaxlib_version=jaxlib_version(),
        backend_platform_version=getattr(client, "platform_version", None),
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        precision=f"jax_default_matmul_precision={precision or 'default'}",
        x64=bool(config_value("jax_enable_x64")),
        cache=cache,
        cache_events=cache_events,
        host_cpu=host_cpu(),
        python=sys.version.split()[0],
        hostname=socket.gethostname(),
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        extra=device_facts(device),
    )
