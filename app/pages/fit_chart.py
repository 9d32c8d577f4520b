"""A fit search as a server-rendered SVG: each probe's peak against the searched value,
one colour per target, with each target's published HBM and its usable bytes as a
horizontal line.

Both axes are logarithmic when their values span more than a factor of 8 (a search over
1 … 65,536 compiles values far apart, and their peaks range over decades), else linear.
A probe that fits is a filled circle; one that does not, a hollow one; a refused probe
(libtpu) is drawn at the figure of its refusal. Bytes are decimal (GB = 10^9 bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.pages.charts import Chart, El, el
from workers.protocol.sizes import byte_text as gb

W, H = 760, 340
PAD_L, PAD_R, PAD_T, PAD_B = 76, 190, 30, 48
PLOT_W, PLOT_H = W - PAD_L - PAD_R, H - PAD_T - PAD_B
LEGEND_X = W - PAD_R + 14
ROW_H = 50
SERIES = 6
"""Target colours in the stylesheet (`.fit-chart .t0` … `.t5`), reused past that."""


@dataclass(frozen=True)
class _Axis:
    """Where a value lands along one axis of `length` pixels: log10 or linear."""

    low: float
    high: float
    log: bool
    length: float

    @classmethod
    def over(cls, values: list[float], length: float) -> _Axis:
        low, high = min(values), max(values)
        log = low > 0 and high / low > 8
        if log:
            return cls(math.log10(low), math.log10(high), True, length)
        if high == low:
            high = low + 1
        return cls(low, high, False, length)

    def at(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        return self.length * (v - self.low) / (self.high - self.low)

    def ticks(self) -> list[float]:
        """A few round values inside the axis: powers of ten (or of 2 between them) on
        a log axis, the ends and the middle on a linear one."""
        if not self.log:
            return [self.low, (self.low + self.high) / 2, self.high]
        powers = [10.0**e for e in range(math.ceil(self.low), math.floor(self.high) + 1)]
        return powers if len(powers) >= 2 else [10**self.low, 10**self.high]


def _points(fit: dict[str, Any]) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """(target's index, target, probe) for every probe with a peak."""
    return [
        (i, t, p)
        for i, t in enumerate(fit["targets"])
        for p in t["probes"]
        if p["peak_bytes"] is not None and p["fits"] is not None
    ]


def _frame(fit: dict[str, Any]) -> tuple[_Axis, _Axis] | None:
    points = _points(fit)
    if not points:
        return None
    xs = [float(p["value"]) for _, _, p in points]
    limits = [float(t["hbm_bytes"]) for t in fit["targets"]]
    limits += [float(t["usable_bytes"]) for t in fit["targets"] if t["usable_bytes"]]
    ys = [float(p["peak_bytes"]) for _, _, p in points] + limits
    x = _Axis.over([min(xs) * (0.8 if min(xs) > 0 else 1), max(xs) * 1.25 or 1], PLOT_W)
    y = _Axis.over([max(1.0, min(ys) / 1.5), max(ys) * 1.5], PLOT_H)
    return x, y


def _axes(fit: dict[str, Any], x: _Axis, y: _Axis) -> list[El]:
    bottom = PAD_T + PLOT_H
    parts = [
        el("line", class_="axis-line", x1=PAD_L, x2=PAD_L, y1=PAD_T, y2=bottom),
        el("line", class_="axis-line", x1=PAD_L, x2=PAD_L + PLOT_W, y1=bottom, y2=bottom),
        el(
            "text",
            f"{fit['dimension']}{' (log scale)' if x.log else ''} · peak per device, "
            f"{'log scale, ' if y.log else ''}GB = 10^9 bytes",
            class_="axis",
            x=PAD_L + PLOT_W / 2,
            y=PAD_T + PLOT_H + 40,
            text_anchor="middle",
        ),
    ]
    for value in y.ticks():
        top = bottom - y.at(value)
        parts.append(
            el("text", gb(value), class_="axis", x=PAD_L - 6, y=top + 4, text_anchor="end")
        )
    for value in x.ticks():
        left = PAD_L + x.at(value)
        label = f"{value:,.0f}"
        parts.append(el("text", label, class_="axis", x=left, y=bottom + 16, text_anchor="middle"))
    return parts


def _limits(index: int, target: dict[str, Any], x: _Axis, y: _Axis) -> list[El]:
    """A target's published HBM line, and its usable bytes (libtpu's on a TPU, a share
    of the HBM on a GPU)."""
    bottom = PAD_T + PLOT_H
    lines = [("hbm", target["hbm_bytes"], f"{target['target']}: {target['hbm_label']}")]
    if target["usable_bytes"]:
        fraction = target["usable_fraction"]
        whose = f"{fraction:g} × HBM" if fraction is not None else "libtpu's usable bytes"
        lines.append(("usable", target["usable_bytes"], f"{target['target']}: {whose}"))
    return [
        el(
            "line",
            title=f"{label} ({gb(value)}, {value:,} bytes)",
            class_=f"limit {kind} t{index % SERIES}",
            x1=PAD_L,
            x2=PAD_L + PLOT_W,
            y1=bottom - y.at(value),
            y2=bottom - y.at(value),
        )
        for kind, value, label in lines
    ]


def _probe(index: int, target: dict[str, Any], probe: dict[str, Any], x: _Axis, y: _Axis) -> El:
    verdict = "fits" if probe["fits"] else ("refused" if probe["refused"] else "does not fit")
    peak = probe["peak_bytes"]
    said = f"peak {gb(peak)} ({peak:,} bytes), {verdict}"
    return el(
        "circle",
        title=f"{target['target']}, {probe['value']:,}: {said}",
        class_=f"probe {'fits' if probe['fits'] else 'over'} t{index % SERIES}",
        cx=PAD_L + x.at(probe["value"]),
        cy=PAD_T + PLOT_H - y.at(peak),
        r=5,
        data_value=probe["value"],
        data_target=target["target"],
    )


def _legend(index: int, target: dict[str, Any]) -> list[El]:
    top = PAD_T + 10 + index * ROW_H
    notes = ["dashed: HBM", *(["dotted: usable"] if target["usable_bytes"] else [])]
    return [
        el("circle", class_=f"probe fits t{index % SERIES}", cx=LEGEND_X + 5, cy=top, r=5),
        el("text", target["target"], class_="legend", x=LEGEND_X + 16, y=top + 4),
        *(
            el("text", note, class_="legend-note", x=LEGEND_X + 16, y=top + 18 + 13 * i)
            for i, note in enumerate(notes)
        ),
    ]


def fit_svg(fit: dict[str, Any], title_id: str = "fit-chart") -> Chart | None:
    """The search's probes as a chart; None until a probe has a peak."""
    frame = _frame(fit)
    if frame is None:
        return None
    x, y = frame
    groups = []
    for i, target in enumerate(fit["targets"]):
        probes = [p for j, _, p in _points(fit) if j == i]
        children = (
            *_limits(i, target, x, y),
            *(_probe(i, target, p, x, y) for p in probes),
            *_legend(i, target),
        )
        groups.append(el("g", children=children, class_="series", data_target=target["target"]))
    below = PAD_T + 10 + len(fit["targets"]) * ROW_H
    notes = [
        el("text", text, class_="legend-note", x=LEGEND_X, y=below + 14 * i)
        for i, text in enumerate(("filled: fits", "hollow: does not fit"))
    ]
    title = (
        f"Peak memory per device against {fit['dimension']}, one colour per target, with "
        "each target's published HBM as a dashed line and its usable bytes dotted; filled "
        "points fit, hollow ones do not."
    )
    height = max(H, below + 14 * len(notes) + 10)  # a legend of many targets lengthens it
    return Chart("fit-chart", W, height, title_id, title, [*_axes(fit, x, y), *groups, *notes])
