"""A worker's own ceilings: the copy bandwidth and matmul rates its first device reaches.

Measured when the worker starts, and sent with its capabilities, so a run's roofline is
drawn against what that worker was measured to do, never a datasheet peak. A busy
machine measures low, and a roof measured low puts runs above it, so the worker measures
again while it is idle (when a round is cheap) and keeps the best of every round
(`best_of`); the ceilings say how many rounds and when the latest was.
Each figure is the best of a few host-synced calls after a warm-up call (on a TPU or a GPU,
of a few spans on the device from a profiled pass: a chip's roofs are in its own time, the
`device-time` boundary, against which a run's device time is set); the matmul
size doubles until one call takes long enough to time well, within a time budget, so a
CPU worker spends a few seconds here and an accelerator much less.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from workers.measure.device_time import module_name, profiled_pass
from workers.protocol import BoundaryId, Ceilings

COPY_BYTES = 256 * 1024 * 1024
"""The array copied to measure bandwidth: large enough to leave every cache behind."""
CPU_COPY_BYTES = 64 * 1024 * 1024
"""On a CPU, a quarter of that is still far beyond the caches and four times quicker."""

MATMUL_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
MIN_N, MAX_N = 256, 8192
LONG_ENOUGH_S = 0.02
"""A matmul call at least this long is timed well enough; smaller sizes double."""
REPEATS = 3
BUDGET_S: dict[str, float] = {"cpu": 1.5}
"""Seconds the matmuls may take, by platform: a CPU worker's start must stay quick."""
DEFAULT_BUDGET_S = 6.0


def _best_time(call: Callable[[], Any], repeats: int = REPEATS) -> float:
    """The shortest of `repeats` host-synced calls, after one uncounted warm-up call."""
    call().block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        call().block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return best


def _best_on_device(function: Any, *args: Any, repeats: int = REPEATS) -> float | None:
    """The shortest span on the device of `repeats` calls of `function` (jitted), from a
    profiled pass after one uncounted warm-up call; None without a device plane (a CPU), or
    where the profiler cannot trace here (the roofs are then host-synced, and say so)."""
    compiled = function.lower(*args).compile()
    module = module_name(compiled.as_text())
    compiled(*args).block_until_ready()
    try:
        times = profiled_pass(lambda: compiled(*args).block_until_ready(), module or "", repeats)
    except (RuntimeError, OSError, ValueError):  # a worker must start without its trace
        return None
    return min(times.spans_s) if times is not None else None


def _timed(function: Any, *args: Any, on_device: bool) -> float:
    """The best time of one call of `function`: on the device where asked and a trace has
    it, else host-synced."""
    found = _best_on_device(function, *args) if on_device else None
    return found if found is not None else _best_time(lambda: function(*args))


def copy_bandwidth(
    device: Any, size: int = COPY_BYTES, *, on_device: bool = False
) -> tuple[float, int]:
    """Bytes read plus written per second by a device-to-device copy of `size` bytes."""
    elements = size // 4
    x = jax.device_put(np.ones(elements, dtype=np.float32), device)
    seconds = _timed(jax.jit(jnp.copy), x, on_device=on_device)
    return 2.0 * elements * 4 / seconds, elements * 4


def matmul_rate(
    device: Any, dtype: str, deadline: float, *, on_device: bool = False
) -> tuple[float, int]:
    """FLOP/s of the largest square matmul of `dtype` timed before `deadline`, and its n."""
    matmul = jax.jit(jnp.matmul)
    best = (0.0, MIN_N)
    n = MIN_N
    while n <= MAX_N:  # the smallest size is always timed, whatever the budget says
        a = jax.device_put(np.ones((n, n), dtype=np.float32), device).astype(dtype)
        seconds = _timed(matmul, a, a, on_device=on_device)
        rate = 2.0 * n**3 / seconds
        if rate > best[0]:
            best = (rate, n)
        # The next size costs about 8× this one's 1 + REPEATS calls: stop if it cannot fit.
        if seconds >= LONG_ENOUGH_S or time.perf_counter() + 8 * 4 * seconds > deadline:
            break
        n *= 2
    return best


def best_of(previous: Ceilings, fresh: Ceilings) -> Ceilings:
    """Two rounds on the same device as one: each figure the better of the two."""
    if previous.device_kind != fresh.device_kind:
        return fresh
    rates = dict(previous.matmul_flops_per_s)
    sizes = dict(previous.matmul_sizes)
    for dtype, rate in fresh.matmul_flops_per_s.items():
        if rate > rates.get(dtype, 0.0):
            rates[dtype] = rate
            sizes[dtype] = fresh.matmul_sizes.get(dtype, sizes.get(dtype, 0))
    copy, copied = previous.copy_bytes_per_s, previous.copy_bytes
    if fresh.copy_bytes_per_s is not None and fresh.copy_bytes_per_s > (copy or 0.0):
        copy, copied = fresh.copy_bytes_per_s, fresh.copy_bytes
    return previous.model_copy(
        update={
            "copy_bytes_per_s": copy,
            "copy_bytes": copied,
            "matmul_flops_per_s": rates,
            "matmul_sizes": sizes,
            "rounds": previous.rounds + fresh.rounds,
            "updated_at": fresh.measured_at,
            "seconds": fresh.seconds,
            "method": fresh.method + "; each figure the best of every round",
        }
    )


def measure_ceilings(
    device: Any, budget_s: float | None = None, copy_bytes: int | None = None
) -> Ceilings:
    """The ceilings of `device`, spending about `budget_s` seconds at most on the matmuls.

    By default a CPU copies CPU_COPY_BYTES within BUDGET_S["cpu"]; accelerators copy
    COPY_BYTES within DEFAULT_BUDGET_S (which their matmuls rarely need).
    """
    cpu = device.platform == "cpu"
    if budget_s is None:
        budget_s = BUDGET_S.get(device.platform, DEFAULT_BUDGET_S)
    if copy_bytes is None:
        copy_bytes = CPU_COPY_BYTES if cpu else COPY_BYTES
    started = time.perf_counter()
    # A chip's roofs are its own time: what a program's device time is set against.
    on_device = not cpu and _best_on_device(jax.jit(jnp.negative), jnp.ones(8)) is not None
    bandwidth, copied = copy_bandwidth(device, copy_bytes, on_device=on_device)
    rates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    share = budget_s / len(MATMUL_DTYPES)
    copied_at = time.perf_counter()
    for i, dtype in enumerate(MATMUL_DTYPES):
        deadline = copied_at + share * (i + 1)
        rates[dtype], sizes[dtype] = matmul_rate(device, dtype, deadline, on_device=on_device)
    timed = "spans on the device (a profiled pass)" if on_device else "host-synced calls"
    return Ceilings(
        device_kind=str(device.device_kind),
        copy_bytes_per_s=bandwidth,
        copy_bytes=copied,
        matmul_flops_per_s=rates,
        matmul_sizes=sizes,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=time.perf_counter() - started,
        boundary=BoundaryId.DEVICE_TIME if on_device else BoundaryId.HOST_SYNC,
        method=(
            f"best of {REPEATS} {timed} after a warm-up: jnp.copy of "
            f"{copied / 2**20:.0f} MiB (read + write counted), and n×n matmuls doubling n "
            f"from {MIN_N} until a call takes {LONG_ENOUGH_S * 1e3:.0f} ms or the budget ends"
        ),
    )
