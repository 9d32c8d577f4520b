"""What libtpu makes available to a program on a TPU target, read from libtpu itself.

libtpu keeps part of a chip's HBM for itself and refuses, at compile time, a program
whose memory passes the rest. Its compile-only client has no memory statistics and its
devices carry no such attribute, and its refusal rounds the figure ("exceeds available
HBM (15.75G)"). So the figure is read the way a program meets it: by compiling. A
program of one byte array and a one-byte result needs exactly its argument, its result
and its code; the refusal of a far too large one gives the figure to within its
rounding, and a bisection over the array's size (512 bytes a step, the granularity of
libtpu's buffers) finds the largest program libtpu compiles. Its peak plus its
generated code is the target's usable bytes: one step more is refused. On a v5e:1x1
this is 16,909,336,064 bytes, the `bytes_limit` a real v5e chip reports.

About twenty compiles of a few milliseconds each, about a second a target. The figure
depends on libtpu's version and a little on the slice (a larger slice keeps a few
kilobytes more), so it is kept per version and target, in memory and in a file under
~/.cache/boundary that every process on the machine shares. docs/design/targets.md says
why this way.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.protocol import CachePolicy, Platform, Target, parse_target
from workers.xla_targets.misfit import hbm_misfit
from workers.xla_targets.topology import build_devices, compiler_of

log = logging.getLogger("boundary.capacity")

STEP = 512
"""The bisection's step: libtpu sizes its HBM buffers in multiples of 512 bytes."""
WINDOW = 0.005
"""Half the window around the refusal's rounded figure, as a share of it (the figure has
at least three significant digits)."""
MAX_PROBES = 64


class CapacityError(RuntimeError):
    """libtpu did not answer as a capacity reading needs (no refusal, or another error)."""


@dataclass(frozen=True)
class Capacity:
    """A target's usable bytes as one libtpu states them, and what reading them took."""

    target: str
    usable_bytes: int
    libtpu: str
    compiles: int
    seconds: float


def source_text(target_id: str, libtpu: str | None) -> str:
    """Where a usable figure comes from, in a sentence (a run's `usable_source`)."""
    return (
        f"libtpu {libtpu or ''}".rstrip()
        + f": the largest program it compiles for {target_id} (peak + generated code), "
        "read by compiling without the hardware"
    )


def cache_file() -> Path:
    """The machine's readings, per libtpu version."""
    return Path.home() / ".cache" / "boundary" / "tpu-capacity.json"


def _version() -> str | None:
    return compiler_of(parse_target("v5e:1x1"))[1]


def _load() -> dict[str, dict[str, int]]:
    try:
        found = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def cached_capacities() -> dict[str, int]:
    """Target id → usable bytes this machine has read with the installed libtpu."""
    version = _version()
    kept = _load().get(f"libtpu {version}", {}) if version else {}
    return {t: int(v) for t, v in kept.items() if isinstance(v, int) and not isinstance(v, bool)}


def _keep(reading: Capacity) -> None:
    """Add a reading to the machine's file (written whole and renamed into place)."""
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        found = _load()
        found.setdefault(f"libtpu {reading.libtpu}", {})[reading.target] = reading.usable_bytes
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".capacity-")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(found, out, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only home: the reading stays in this process
        log.warning("could not keep the TPU capacity in %s: %s", path, exc)


class _Prober:
    """Compiles the one-array program of `size` bytes for a target's first device."""

    def __init__(self, target: Target) -> None:
        import jax

        self.device = build_devices(target)[0]
        self.compiles = 0
        self._jax = jax

    def need(self, size: int) -> tuple[int | None, BaseException | None]:
        """(peak + code, None) when libtpu compiles the program, else (None, refusal)."""
        jax, jnp = self._jax, self._jax.numpy
        sharding = jax.sharding.SingleDeviceSharding(self.device)
        argument = jax.ShapeDtypeStruct((size,), jnp.uint8, sharding=sharding)
        self.compiles += 1
        try:
            compiled = jax.jit(lambda a: a[0]).lower(argument).compile()
        except Exception as exc:  # sorted below: a refusal, or an error
            if hbm_misfit(exc) is None:
                raise CapacityError(f"libtpu failed for reasons other than HBM: {exc}") from exc
            return None, exc
        stats = compiled.memory_analysis()
        peak = getattr(stats, "peak_memory_in_bytes", None)
        code = getattr(stats, "generated_code_size_in_bytes", None)
        if peak is None or code is None:
            raise CapacityError("libtpu's memory_analysis() gave no peak or code size")
        return int(peak) + int(code), None


def _window(prober: _Prober, huge: int) -> tuple[int, int, int]:
    """(a size that compiles, its need, a size refused) around the refusal's figure."""
    _, refusal = prober.need(huge)
    misfit = hbm_misfit(refusal) if refusal is not None else None
    if misfit is None or misfit.available_bytes is None:
        raise CapacityError(f"libtpu compiled a {huge:,}-byte program, or named no figure")
    stated = misfit.available_bytes
    lo = int(stated * (1 - WINDOW)) // STEP * STEP
    hi = int(stated * (1 + WINDOW)) // STEP * STEP + STEP
    need, _ = prober.need(lo)
    while need is None and lo > STEP:  # the figure was rounded further than thought
        lo = lo // 2 // STEP * STEP
        need, _ = prober.need(lo)
    if need is None or prober.need(hi)[0] is not None:
        raise CapacityError(f"no window around libtpu's figure {stated:,} held")
    return lo, need, hi


def read_capacity(target: Target) -> Capacity:
    """Read the target's usable bytes from libtpu (compiles; about a second)."""
    from workers.compiler.compile_cache import apply_cache_policy, default_cache_dir

    if target.platform is not Platform.TPU:
        raise CapacityError(f"{target.id} is no TPU target: libtpu states no capacity for it")
    t0 = time.perf_counter()
    apply_cache_policy(CachePolicy.COLD, default_cache_dir())  # no probe reaches the disk
    prober = _Prober(target)
    lo, best, hi = _window(prober, max(2**40, 64 * target.chip.device_hbm_bytes))
    while hi - lo > STEP and prober.compiles < MAX_PROBES:
        mid = (lo + hi) // 2 // STEP * STEP
        need, _ = prober.need(mid)
        if need is not None:
            lo, best = mid, need
        else:
            hi = mid
    if hi - lo > STEP:
        raise CapacityError(f"the bisection for {target.id} did not close in {MAX_PROBES}")
    version = compiler_of(target)[1] or "unknown"
    return Capacity(target.id, best, version, prober.compiles, time.perf_counter() - t0)


@functools.cache
def usable_bytes(target_id: str) -> int | None:
    """The target's usable bytes, from this machine's readings or read now and kept; None
    for a GPU target or where libtpu cannot answer (not installed, or failing)."""
    target = parse_target(target_id)
    if target.platform is not Platform.TPU:
        return None
    kept = cached_capacities().get(target.id)
    if kept is not None:
        return kept
    try:
        reading = read_capacity(target)
    except Exception as exc:  # noqa: BLE001 - no figure is "not reported", never a guess
        log.warning("could not read the usable HBM of %s from libtpu: %s", target.id, exc)
        return None
    _keep(reading)
    log.info(
        "%s: libtpu %s makes %s bytes available to a program (%d compiles, %.1f s)",
        target.id,
        reading.libtpu,
        f"{reading.usable_bytes:,}",
        reading.compiles,
        reading.seconds,
    )
    return reading.usable_bytes


def lock_file() -> Path:
    """Held by the one process of the machine that reads missing targets (`read_missing`)."""
    return cache_file().with_name("tpu-capacity.lock")


@contextlib.contextmanager
def _reading_alone() -> Iterator[bool]:
    """Whether this process may read now: True while it holds the machine's reading lock
    (or where the lock cannot be made, a read-only home), False while another holds it."""
    try:
        lock_file().parent.mkdir(parents=True, exist_ok=True)
        handle = lock_file().open("a")
    except OSError:
        yield True
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True  # released when the file closes


def reading_elsewhere() -> bool:
    """Whether another process of the machine is reading missing targets now."""
    with _reading_alone() as alone:
        return not alone


def read_missing(target_ids: Iterable[str], budget_s: float) -> dict[str, int]:
    """Every reading of `target_ids` this machine has, reading missing ones in order
    until `budget_s` has passed (at least one); the rest wait for the next call. One
    process of the machine reads at a time: where another is reading, this one reads
    nothing and answers what is kept (the workers of one machine would otherwise read the
    same targets side by side, in the same order)."""
    with _reading_alone() as alone:
        if not alone:
            return cached_capacities()
        return _read_missing(target_ids, budget_s)


def _read_missing(target_ids: Iterable[str], budget_s: float) -> dict[str, int]:
    known = cached_capacities()
    deadline = time.monotonic() + budget_s
    read = 0
    for target_id in target_ids:
        if target_id in known:
            continue
        if read and time.monotonic() > deadline:
            break
        read += 1
        usable = usable_bytes(target_id)
        if usable is not None:
            known[target_id] = usable
    return known


def reading_environment(environ: dict[str, str]) -> dict[str, str]:
    """The environment of a process that only reads capacities: JAX on the CPU whatever the
    machine has (a deviceless topology needs no device, and a real TPU stays its runner's),
    libtpu allowed beside another process's."""
    from workers.compiler.jaxenv import jax_environment

    env = {**environ, **jax_environment(environ, found="")}
    return {**env, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


def main(argv: list[str]) -> int:
    """`python -m workers.xla_targets.capacity SECONDS TARGET...`: read the targets this
    machine has not, for about SECONDS, keep them, and print every reading as JSON. An
    idle worker runs it apart from its runner, which need not hold the topologies of
    6,144-chip slices for the rest of its life (about 300 MB for all of them)."""
    if len(argv) < 2:
        print("usage: python -m workers.xla_targets.capacity SECONDS TARGET...", file=sys.stderr)
        return 2
    print(json.dumps(read_missing(argv[1:], float(argv[0]))))
    return 0


def capacity_report(target: Target) -> dict[str, Any]:
    """usable_bytes and usable_source for a TPU target's memory report (empty when the
    figure cannot be read: the page then says not reported)."""
    usable = usable_bytes(target.id)
    if usable is None:
        return {}
    return {"usable_bytes": usable, "usable_source": source_text(target.id, _version())}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
