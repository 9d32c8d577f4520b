"""The submission rate: at most N submissions per client in any sliding 60-second window.

The submissions themselves are counted in the store (app.store.limits), so that every
replica sees them all; this is the rule applied to them.
"""

from __future__ import annotations

from collections.abc import Sequence

WINDOW_S = 60.0


def retry_after(
    hits: Sequence[tuple[float, int]], n: int, per_minute: int, at: float
) -> float | None:
    """Whether `n` more submissions fit beside `hits` ((when, how many) within the window
    before `at`, oldest first): None if they do, else the seconds until they would. More
    than `per_minute` never fit; the answer is then a whole window."""
    if n > per_minute:
        return WINDOW_S
    over = sum(count for _, count in hits) + n - per_minute
    if over <= 0:
        return None
    for hit_at, count in hits:
        over -= count
        if over <= 0:
            return max(0.0, hit_at + WINDOW_S - at)
    return WINDOW_S
