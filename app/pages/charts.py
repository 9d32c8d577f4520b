"""Charts as data: the shapes of an SVG picture, drawn by `templates/_chart.html`.

Chart modules (samples, distributions, roofline, sweep, scaling) compute geometry and
return a `Chart`; the template writes the markup with autoescaping on, so no label (a run
id, a worker name, a workload's parameter) can ever become markup. Tag and attribute
names are the modules' own constants; every value and text is escaped.

Charts are drawn at their own size (`width` × `height` CSS pixels), never scaled down:
their 12-13 px text stays readable and a narrow screen scrolls the chart's own box. A
`fluid` chart instead takes its box's width (up to `width`) with no viewBox of its own: its
elements place themselves in percent of that width (or in a nested <svg> that stretches),
so its text keeps its size while the picture fits the box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

Number = int | float


def fmt(value: Number) -> str:
    """A coordinate as SVG wants it: one decimal, no trailing noise."""
    return f"{value:.1f}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class El:
    """One SVG element: its tag, attributes, text, tooltip and children."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    text: str = ""
    title: str = ""
    children: tuple[El, ...] = ()


def el(
    tag: str, text: str = "", title: str = "", children: tuple[El, ...] = (), **attrs: Any
) -> El:
    """An element; attribute names use `_` for `-` and a trailing `_` for Python keywords
    (`class_`); numbers are formatted with `fmt`."""
    out = {}
    for key, value in attrs.items():
        name = key.rstrip("_").replace("_", "-")
        out[name] = fmt(value) if isinstance(value, int | float) else str(value)
    return El(tag, out, text, title, children)


@dataclass(frozen=True)
class Chart:
    """A whole picture: its class, size, accessible title and elements."""

    cls: str
    width: int
    height: int
    title_id: str
    title: str
    elements: list[El]
    data: dict[str, str] = field(default_factory=dict)
    """`data-*` attributes on the <svg>, for tests and scripts."""
    fluid: bool = False
    """As wide as its box (at most `width`), its text unscaled: see the module's note."""


# Axis ticks: round values (1, 2 or 5 × a power of ten apart) whose labels fit the padding.

GLYPH_EM: dict[str, float] = {".": 0.318, " ": 0.318, "m": 0.974, "s": 0.521, "µ": 0.636}
"""Advance widths in em of DejaVu Sans (a common default sans, and wider than most):
digits 0.636, other letters taken as 0.7. Enough to tell whether a label fits."""


def label_width(text: str, size: float = 12.0) -> float:
    """About how many pixels `text` takes at `size` px (see GLYPH_EM)."""
    return size * sum(GLYPH_EM.get(c, 0.636 if c.isdigit() else 0.7) for c in text)


def nice_ticks(lo: float, hi: float, step: tuple[int, int]) -> list[float]:
    """The multiples of `step` (m, e: m × 10^e, with m one of 1, 2, 5) in [lo, hi]."""
    m, e = step
    size = m * 10.0**e
    first, last = math.ceil(lo / size - 1e-9), math.floor(hi / size + 1e-9)
    # An integer over an exact power of ten rounds once: 0.3, not 0.30000000000000004.
    return [k * m / 10 ** (-e) if e < 0 else float(k * m * 10**e) for k in range(first, last + 1)]


def seconds_ticks(lo: float, hi: float, room: float, most: int = 5) -> list[tuple[float, str]]:
    """Round times in [lo, hi] and their labels ("705 ms"), each label at most `room` px
    wide: the finest 1-2-5 step with at most `most` ticks whose labels fit, coarser steps
    while they do not. No ticks when no label fits (a spread under about 1e-5 of the
    times) or [lo, hi] is empty: a label clipped at the chart's edge would misread."""
    if not hi > lo:
        return []
    found: list[list[tuple[float, str]]] = []  # finest step first
    finest = math.floor(math.log10((hi - lo) / most))
    for i in range(12):  # 1, 2, 5 × 10^finest, then × 10^(finest + 1), …
        m, e = (1, 2, 5)[i % 3], finest + i // 3
        values = nice_ticks(lo, hi, (m, e))
        if not values:
            break
        if len(values) <= most:
            found.append([(v, _seconds_label(v, m * 10.0**e, max(values))) for v in values])
    fits = [t for t in found if max(label_width(text) for _, text in t) <= room]
    return next((t for t in fits if len(t) > 1), fits[0] if fits else [])


def _seconds_label(value: float, step: float, top: float) -> str:
    """`value` in the unit of `top` (s, ms or µs) with the decimals `step` needs."""
    top = abs(top)
    scale, unit = (1.0, "s") if top >= 1 else (1e-3, "ms") if top >= 1e-3 else (1e-6, "µs")
    decimals = max(0, -math.floor(math.log10(step / scale) + 1e-9))
    return f"{value / scale:.{decimals}f} {unit}"
