"""A worker's own ceilings: the copy bandwidth and matmul rates its first device reaches.

Measured when the worker starts, and sent with its capabilities, so a run's roofline is
drawn against what that worker was measured to do, never a datasheet peak. A busy
machine measures low, and a roof measured low puts runs above it, so the worker measures
again while it is idle (when a round is cheap) and keeps the best of every round
(`best_of`); the ceilings say how many rounds and when the latest was.
Each figure is the best of a few host-synced calls after a warm-up call; the matmul
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

from workers.protocol import Ceilings

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


def copy_bandwidth(device: Any, size: int = COPY_BYTES) -> tuple[float, int]:
    """Bytes read plus written per second by a device-to-device copy of `size` bytes."""
    elements = size // 4
    x = jax.device_put(np.ones(elements, dtype=np.float32), device)
    copy = jax.jit(jnp.copy)
    seconds = _best_time(lambda: copy(x))
    return 2.0 * elements * 4 / seconds, elements * 4


def matmul_rate(device: Any, dtype: str, deadline: float) -> tuple[float, int]:
    """FLOP/s of the largest square matmul of `dtype` timed before `deadline`, and its n."""
    matmul = jax.jit(jnp.matmul)
    best = (0.0, MIN_N)
    n = MIN_N
    while n <= MAX_N:  # the smallest size is always timed, whatever the budget says
        a = jax.device_put(np.ones((n, n), dtype=np.float32), device).astype(dtype)

        def square(a: Any = a) -> Any:
            return matmul(a, a)

        seconds = _best_time(square)
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
    bandwidth, copied = copy_bandwidth(device, copy_bytes)
    rates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    share = budget_s / len(MATMUL_DTYPES)
    copied_at = time.perf_counter()
    for i, dtype in enumerate(MATMUL_DTYPES):
        rates[dtype], sizes[dtype] = matmul_rate(device, dtype, copied_at + share * (i + 1))
    return Ceilings(
        device_kind=str(device.device_kind),
        copy_bytes_per_s=bandwidth,
        copy_bytes=copied,
        matmul_flops_per_s=rates,
        matmul_sizes=sizes,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=time.perf_counter() - started,
        method=(
            f"best of {REPEATS} host-synced calls after a warm-up: jnp.copy of "
            f"{copied / 2**20:.0f} MiB (read + write counted), and n×n matmuls doubling n "
            f"from {MIN_N} until a call takes {LONG_ENOUGH_S * 1e3:.0f} ms or the budget ends"
        ),
    )
