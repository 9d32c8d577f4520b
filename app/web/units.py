"""Units a reader can compare at a glance, shared by every page that shows a time."""

from __future__ import annotations


def format_seconds(value: float) -> str:
    """A duration with a unit a reader can compare at a glance."""
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    if 0 < value < 1e-6:  # an instruction on a chip: 14 ns, not "0.0 µs"
        return f"{value * 1e9:.3g} ns"
    return f"{value * 1e6:.1f} µs"


def format_si(value: float, unit: str) -> str:
    """A count in decimal (SI) units, three significant digits: '3.02 GFLOP', '94.2 MB'
    (G = 10^9, as vendors count bytes and FLOPs)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
