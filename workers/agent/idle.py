"""What a worker does while idle (a long poll came back empty): measure its ceilings again
when a round is cheap and the last is old, and read more TPU targets' usable bytes from
libtpu. Each step answers the worker's new capabilities, or None when nothing changed;
the agent then registers again under the same id, and the server keeps the new figures.

The usable bytes are read in a process of their own (`python -m
workers.xla_targets.capacity`), JAX on the CPU: the topologies of the largest slices stay
in the process that built them (about 300 MB for all), which need not be the runner."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from typing import Any

from workers.agent.runner_pool import RunnerPool
from workers.agent.runner_process import RunnerFailed
from workers.protocol import TPU_TARGET_IDS, parse_target
from workers.xla_targets.capacity import (
    cached_capacities,
    reading_elsewhere,
    reading_environment,
)

log = logging.getLogger("boundary.worker")

CEILINGS_REFRESH_S = 900.0
"""An idle worker measures its ceilings again at most this often."""
CEILINGS_CHEAP_S = 5.0
"""…and only when the last round took at most this long (a CPU's takes about 2 s)."""
CAPACITY_ROUND_S = 20.0
"""How long one idle round reads usable bytes (about a second a target, more for the
largest slices; all of them take a few rounds, once per machine and libtpu version)."""
CAPACITY_BACKOFF_S = 900.0
"""After a reading process fails, the next waits this long."""


class Idle:
    """An idle worker's rounds, over its runner pool."""

    def __init__(self, pool: RunnerPool) -> None:
        self.pool = pool
        self.ceilings_at = time.monotonic()
        self.capacity_after = 0.0

    async def ceilings(self, capabilities: dict[str, Any]) -> dict[str, Any] | None:
        """The ceilings measured again (the best of every round kept), when due."""
        ceilings = capabilities.get("ceilings")
        if not ceilings:
            return None
        now = time.monotonic()
        cheap = float(ceilings.get("seconds") or 0.0) <= CEILINGS_CHEAP_S
        if not cheap or now - self.ceilings_at < CEILINGS_REFRESH_S:
            return None
        self.ceilings_at = now
        try:
            runner = await self.pool.get(1)
            fresh = await runner.ceilings(ceilings)
        except RunnerFailed as exc:
            log.warning("re-measuring the ceilings failed: %s", exc)
            return None
        if fresh is None or fresh == ceilings:
            return None
        return {**capabilities, "ceilings": fresh}

    async def capacities(self, capabilities: dict[str, Any]) -> dict[str, Any] | None:
        """More TPU targets' usable bytes, read from libtpu in a process of its own while
        some are missing (smallest slices first)."""
        known = capabilities.get("capacities") or {}
        targets = [t for t in capabilities.get("targets") or [] if t in TPU_TARGET_IDS]
        missing = sorted((t for t in targets if t not in known), key=_devices)
        if not missing or time.monotonic() < self.capacity_after or reading_elsewhere():
            return None  # (another worker of the machine reading: its readings come next time)
        if not await _read_apart(missing):
            self.capacity_after = time.monotonic() + CAPACITY_BACKOFF_S
        fresh = {t: v for t, v in cached_capacities().items() if t in targets}
        if all(t in fresh for t in targets):
            log.info("libtpu's usable bytes read for all %d TPU targets", len(targets))
        return {**capabilities, "capacities": fresh} if fresh != known else None


def _devices(target_id: str) -> int:
    return parse_target(target_id).count


async def _read_apart(targets: list[str]) -> bool:
    """Run one reading process over `targets`; whether it ended well."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "workers.xla_targets.capacity",
        str(CAPACITY_ROUND_S),
        *targets,
        env=reading_environment(dict(os.environ)),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), CAPACITY_ROUND_S + 120.0)
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        log.warning("reading TPU usable bytes took too long: stopped")
        return False
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
        log.warning("reading TPU usable bytes failed (%s): %s", proc.returncode, " | ".join(tail))
        return False
    return True
