"""Giving a process the virtual CPU devices a job needs. No jax at import.

XLA reads the host device count once, when the CPU backend starts, so a jax-cpu job
that spans N devices must run in a process started with that count. `boundary run`
sets it for itself when JAX is not yet loaded, and otherwise runs the job in a child
process that has it: the engine never runs a mesh on fewer devices than asked.
"""

from __future__ import annotations

import os
import subprocess
import sys

from workers.catalog import CatalogError, parse_params
from workers.catalog.jaxexport import ArtifactError, read_header
from workers.compiler.jaxenv import child_jax_environment
from workers.files import FileCache
from workers.protocol import JobSpec, PathId

DEVICE_FLAG = "--xla_force_host_platform_device_count"


def device_count_flag(flags: str) -> int | None:
    """The host device count an XLA_FLAGS string asks for, if any."""
    for flag in flags.split():
        if flag.startswith(DEVICE_FLAG + "="):
            value = flag.split("=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def with_device_count(flags: str, count: int) -> str:
    """`flags` asking for at least `count` host devices (a larger count is kept)."""
    current = device_count_flag(flags)
    if current is not None and current >= count:
        return flags
    kept = [f for f in flags.split() if not f.startswith(DEVICE_FLAG)]
    return " ".join([*kept, f"{DEVICE_FLAG}={count}"])


def cpu_devices_needed(job: JobSpec, max_bytes: int) -> int:
    """How many CPU devices `job` needs here (1 unless a jax-cpu job spans more).

    Raises CatalogError for parameters that do not validate.
    """
    if job.path is not PathId.JAX_CPU:
        return 1
    params = parse_params(job.workload, job.params, max_bytes)
    digest = job.params.get("artifact")
    if params.spans_artifact_devices and isinstance(digest, str):
        # An uploaded function spans the devices it was exported for: its header says.
        try:
            return read_header(FileCache().get(digest, "params.artifact")).nr_devices
        except ArtifactError as exc:
            raise CatalogError(f"params.artifact: {exc}", "params.artifact") from None
    return params.devices()


def ensure_cpu_devices(job: JobSpec, argv: list[str], max_bytes: int) -> int | None:
    """Make this process able to run `job`, or run it in a child that can.

    Returns None when the job should run here, or the child's exit status when the job
    already ran in a child process (its output went straight to this process's stdout).
    """
    need = cpu_devices_needed(job, max_bytes)
    if need <= 1:
        return None
    flags = with_device_count(os.environ.get("XLA_FLAGS", ""), need)
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = flags  # read when JAX starts its CPU backend
        return None
    import jax

    if len(jax.devices("cpu")) >= need:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    child = [sys.executable, "-m", "workers.cli", "run", *argv]
    # A jax-cpu job: the child runs on the CPU, never on the TPU chip this process may hold.
    env = {**os.environ, **child_jax_environment(os.environ), "XLA_FLAGS": flags}
    return subprocess.call(child, env=env)
