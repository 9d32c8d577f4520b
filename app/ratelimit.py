"""A sliding-window rate limiter, keyed by client."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RateLimiter:
    """At most `per_minute` events per key in any sliding 60-second window."""

    per_minute: int
    _hits: dict[str, deque[float]] = field(default_factory=dict)

    def retry_after(self, key: str, at: float) -> float | None:
        """Count one event for `key`; None if allowed, else seconds until one would be."""
        hits = self._hits.setdefault(key, deque())
        while hits and hits[0] <= at - 60.0:
            hits.popleft()
        if len(hits) >= self.per_minute:
            return hits[0] + 60.0 - at
        hits.append(at)
        if len(self._hits) > 10_000:  # forget quiet clients so the table stays small
            for k in [k for k, v in self._hits.items() if not v or v[-1] <= at - 60.0]:
                del self._hits[k]
        return None
