"""What a worker does while idle (a long poll came back empty): measure its ceilings again
when a round is cheap and the last is old, and read more TPU targets' usable bytes from
libtpu. Each step answers the worker's new capabilities, or None when nothing changed;
the agent then registers again under the same id, and the server keeps the new figures."""

from __future__ import annotations

import logging
import time
from typing import Any

from workers.agent.runner_pool import RunnerFailed, RunnerPool
from workers.protocol import TPU_TARGET_IDS

log = logging.getLogger("boundary.worker")

CEILINGS_REFRESH_S = 900.0
"""An idle worker measures its ceilings again at most this often."""
CEILINGS_CHEAP_S = 5.0
"""…and only when the last round took at most this long (a CPU's takes about 2 s)."""


class Idle:
    """An idle worker's rounds, over its runner pool."""

    def __init__(self, pool: RunnerPool) -> None:
        self.pool = pool
        self.ceilings_at = time.monotonic()

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
        """A few more TPU targets' usable bytes, read from libtpu (about a second each,
        once per machine and libtpu version), while some are missing."""
        known = capabilities.get("capacities") or {}
        targets = [t for t in capabilities.get("targets") or [] if t in TPU_TARGET_IDS]
        if all(t in known for t in targets):
            return None
        try:
            runner = await self.pool.get(1)
            fresh = await runner.capacities(targets)
        except RunnerFailed as exc:
            log.warning("reading the TPU targets' usable bytes failed: %s", exc)
            return None
        if all(t in fresh for t in targets):
            log.info("libtpu's usable bytes read for all %d TPU targets", len(targets))
        return {**capabilities, "capacities": fresh} if fresh != known else None
