"""A sliding-window rate limiter, keyed by client."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW_S = 60.0


@dataclass
class RateLimiter:
    """At most `per_minute` events per key in any sliding 60-second window."""

    per_minute: int
    _hits: dict[str, deque[float]] = field(default_factory=dict)

    def retry_after(self, key: str, at: float, n: int = 1, *, record: bool = True) -> float | None:
        """Whether `n` more events for `key` fit: None if they do (counted unless `record`
        is false), else the seconds until they would. More than `per_minute` events never
        fit; the answer is then a whole window."""
        hits = self._hits.setdefault(key, deque())
        while hits and hits[0] <= at - WINDOW_S:
            hits.popleft()
        if n > self.per_minute:
            return WINDOW_S
        over = len(hits) + n - self.per_minute
        if over > 0:
            return hits[over - 1] + WINDOW_S - at
        if record:
            hits.extend([at] * n)
        if len(self._hits) > 10_000:  # forget quiet clients so the table stays small
            for k in [k for k, v in self._hits.items() if not v or v[-1] <= at - WINDOW_S]:
                del self._hits[k]
        return None
