"""Units a reader can compare at a glance, shared by every page that shows a time."""

from __future__ import annotations


def format_seconds(value: float) -> str:
    """A duration with a unit a reader can compare at a glance."""
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} µs"
