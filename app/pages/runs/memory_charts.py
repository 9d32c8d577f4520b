"""The memory report's two pictures, as `Chart` data (drawn by templates/_chart.html):

- the live-bytes curve over the program's steps, the peak marked at its step, and the
  chip's HBM as a line (or said to be above the scale when it dwarfs the program);
- the peak's make-up, one bar stacked by kind, the unattributed bytes last.

Both are fluid: they take their box's width (a phone's 390 px as a desktop's), the shapes
in a nested picture that stretches, the words at their own size placed in percent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.pages.charts import Chart, El, el, nice_ticks
from workers.protocol.sizes import byte_text as gb

W, PLOT_H = 640, 180
TOP, BOTTOM = 24, 22
"""Room above the plot (the peak's label) and below it (the steps' labels)."""
HBM_ON_SCALE = 2.0
"""The HBM line is drawn when it is at most this many times the peak; above, said in words."""


def _round_steps(top: float, most: int) -> list[float]:
    """The multiples of the finest 1-2-5 step that gives at most `most` of them in [0, top]."""
    finest = max(math.floor(math.log10(top / most)), 0)
    for i in range(9):  # 1, 2, 5 × 10^finest, then × 10^(finest + 1), …
        values = nice_ticks(0, top, ((1, 2, 5)[i % 3], finest + i // 3))
        if len(values) <= most:
            return values
    return [0.0]


def byte_ticks(top: int) -> list[tuple[int, str]]:
    """Round byte counts from 0 to `top` (at most 4 above 0), in decimal units."""
    if top <= 0:
        return []
    return [(int(v), gb(int(v)) if v else "0") for v in _round_steps(top, 5)]


def step_ticks(steps: int, most: int = 4) -> list[int]:
    """Round step numbers in [0, steps − 1], at most `most`."""
    return [int(v) for v in _round_steps(max(steps - 1, 1), most)]


def _x(step: int, steps: int) -> float:
    return W * step / max(steps - 1, 1)


def _y(value: float, scale: float) -> float:
    return TOP + PLOT_H * (1 - value / scale)


def _percent(x: float) -> str:
    return f"{100 * x / W:.2f}%"


@dataclass(frozen=True)
class Curve:
    """What the curve shows: the report's points and steps, its peak, and what the device
    may hold (`hbm`: its usable bytes, or the chip's HBM where `word` says so)."""

    timeline: list[list[int]]
    steps: int
    peak: int
    peak_step: int
    hbm: int | None
    word: str = "usable"

    @property
    def hbm_on_scale(self) -> bool:
        return self.hbm is not None and self.hbm <= HBM_ON_SCALE * self.peak


def _line(cls: str, x1: float, x2: float, y1: float, y2: float) -> El:
    return el(
        "line", class_=cls, x1=f"{x1:.1f}", x2=f"{x2:.1f}", y1=f"{y1:.1f}", y2=f"{y2:.1f}",
        vector_effect="non-scaling-stroke",
    )  # fmt: skip


def _shapes(c: Curve, ticks: list[tuple[int, str]], scale: float) -> list[El]:
    """The stretched part: grid lines, the area and line of live bytes, the peak, the HBM."""
    points = " ".join(f"{_x(s, c.steps):.1f},{_y(b, scale):.1f}" for s, b in c.timeline)
    base = _y(0, scale)
    first, last = (c.timeline[0][0], c.timeline[-1][0]) if c.timeline else (0, 0)
    area = f"{_x(first, c.steps):.1f},{base:.1f} {points} {_x(last, c.steps):.1f},{base:.1f}"
    shapes = [_line("grid", 0, W, _y(v, scale), _y(v, scale)) for v, _ in ticks]
    shapes.append(el("polygon", class_="live-area", points=area))
    shapes.append(el("polyline", class_="live", points=points, vector_effect="non-scaling-stroke"))
    px = _x(c.peak_step, c.steps)
    shapes.append(_line("peak-mark", px, px, TOP - 4, base))
    if c.hbm_on_scale and c.hbm is not None:
        shapes.append(_line("hbm", 0, W, _y(c.hbm, scale), _y(c.hbm, scale)))
    return shapes


def _words(c: Curve, ticks: list[tuple[int, str]], scale: float) -> list[El]:
    """The words, at their own size: byte ticks, the HBM line's name, the peak, the steps."""
    # A tick label under the plot's top edge would sit on the peak's label: left out.
    words = [
        el("text", label, class_="axis", x=2, y=f"{_y(v, scale) - 3:.1f}")
        for v, label in ticks[1:]
        if _y(v, scale) - 3 > TOP + 10
    ]
    if c.hbm_on_scale and c.hbm is not None:
        y = _y(c.hbm, scale) - 4
        words.append(
            el("text", f"{c.word} {gb(c.hbm)}", class_="axis hbm-label", x="100%", dx=-2,
               y=f"{y:.1f}", text_anchor="end")
        )  # fmt: skip
    px = _x(c.peak_step, c.steps)
    anchor = "end" if px > W / 2 else "start"
    label = f"peak {gb(c.peak)} at step {c.peak_step:,}"
    words.append(
        el("text", label, class_="peak-label", x=_percent(px), dx=-4 if anchor == "end" else 4,
           y=TOP - 8, text_anchor=anchor)
    )  # fmt: skip
    for s in step_ticks(c.steps):
        at = _x(s, c.steps)
        side = "start" if at < W * 0.1 else "end" if at > W * 0.9 else "middle"
        y = _y(0, scale) + 16
        words.append(el("text", f"{s:,}", class_="axis", x=_percent(at), y=y, text_anchor=side))
    return words


def curve_chart(c: Curve, chart_id: str = "memory-curve") -> Chart:
    """The live bytes at each step, the peak and the HBM line (module docstring)."""
    hbm = c.hbm or 0
    ticks = byte_ticks(max(c.peak, hbm) if c.hbm_on_scale else c.peak)
    scale = float(max(ticks[-1][0] if ticks else 0, c.peak, hbm if c.hbm_on_scale else 0, 1))
    height = TOP + PLOT_H + BOTTOM
    plot = el(
        "svg", children=tuple(_shapes(c, ticks, scale)), viewBox=f"0 0 {W} {height}",
        preserveAspectRatio="none", width="100%", height=height,
    )  # fmt: skip
    over = (
        ""
        if c.hbm_on_scale or c.hbm is None
        else f"; the device's {c.word} bytes ({gb(hbm)}) are off this scale"
    )
    title = (
        f"Live bytes over the program's {c.steps:,} steps: peak {gb(c.peak)} at step "
        f"{c.peak_step:,}{over}"
    )
    data = {"peak": str(c.peak), "peak-step": str(c.peak_step)}
    words = _words(c, ticks, scale)
    return Chart("memory-curve", W, height, chart_id, title, [plot, *words], data, fluid=True)


def kinds_chart(parts: list[tuple[str, int]], peak: int, chart_id: str = "memory-kinds") -> Chart:
    """The peak's bytes as one bar, stacked by kind (`parts`: (kind, bytes), in order)."""
    height = 30
    x = 0.0
    rects: list[El] = []
    for kind, value in parts:
        if value <= 0:
            continue
        width = W * value / max(peak, 1)
        share = 100 * value / max(peak, 1)
        rects.append(
            el(
                "rect",
                title=f"{kind}: {gb(value)} ({share:.3g} % of the peak)",
                class_=f"mk mk-{kind}",
                x=f"{x:.2f}",
                y=0,
                width=f"{max(width, 0.5):.2f}",
                height=height,
            )
        )
        x += width
    bar = el(
        "svg", children=tuple(rects), viewBox=f"0 0 {W} {height}", preserveAspectRatio="none",
        width="100%", height=height,
    )  # fmt: skip
    named = ", ".join(f"{k} {gb(v)}" for k, v in parts if v > 0)
    title = f"The peak of {gb(peak)} by kind: {named}"
    return Chart("memory-kinds", W, height, chart_id, title, [bar], fluid=True)
