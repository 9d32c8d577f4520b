"""A scaling series as a server-rendered SVG: step time against device count.

Strong scaling (global workload fixed) and weak scaling (per-device workload fixed) are
drawn as two labelled lines over device counts 1, 2, 4, … on a log₂ axis, each with the
line its ideal would follow from its one-device point (strong: time ÷ devices; weak:
flat). Every point is the median of whole-step times at the host-sync boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.pages.charts import Chart, El, el
from app.pages.runs.plots import format_seconds
from workers.protocol import ScalingPoint, ScalingSeries

W, H = 760, 300
PAD_L, PAD_R, PAD_T, PAD_B = 72, 170, 40, 44
PLOT_W, PLOT_H = W - PAD_L - PAD_R, H - PAD_T - PAD_B
LEGEND_X = W - PAD_R + 12
ROW_H = 34
"""Height of one series' entry in the legend."""

MODE_LABELS: dict[str, str] = {
    "strong": "strong scaling (global workload fixed)",
    "weak": "weak scaling (per-device workload fixed)",
}


def _by_mode(series: ScalingSeries) -> dict[str, list[ScalingPoint]]:
    lines: dict[str, list[ScalingPoint]] = {}
    for point in series.points:
        if point.median_s is not None and point.median_s > 0:
            lines.setdefault(point.mode, []).append(point)
    for points in lines.values():
        points.sort(key=lambda p: p.devices)
    return lines


def _ideal(mode: str, first: ScalingPoint, devices: int) -> float:
    assert first.median_s is not None
    if mode == "strong":
        return first.median_s * first.devices / devices
    return first.median_s


@dataclass(frozen=True)
class _Frame:
    """Where a point lands: device counts on a log₂ axis from the fewest to the most,
    times on a linear axis from 0 to `top` seconds."""

    low: float
    high: float
    top: float

    @classmethod
    def around(cls, counts: list[int], times: list[float]) -> _Frame:
        """The frame for these device counts (sorted) and times, with room above."""
        return cls(math.log2(counts[0]), math.log2(counts[-1]), max(times) * 1.15)

    def x(self, devices: int) -> float:
        if self.high == self.low:
            return PAD_L + PLOT_W / 2
        return PAD_L + PLOT_W * (math.log2(devices) - self.low) / (self.high - self.low)

    def y(self, seconds: float) -> float:
        return PAD_T + PLOT_H * (1 - min(seconds, self.top) / self.top)


def _title(series: ScalingSeries, modes: list[str]) -> str:
    """The chart's accessible title: which scalings, what is timed, and the label."""
    named = " and ".join(MODE_LABELS.get(m, m) for m in modes)
    return (
        f"{named}: median step time ({series.boundary.value}) against device count. {series.label}"
    )


def _axes(series: ScalingSeries, counts: list[int], frame: _Frame) -> list[El]:
    """The label, both axes, their ticks (three times, every device count) and caption."""
    bottom = PAD_T + PLOT_H
    times = [frame.top * frac for frac in (0.0, 0.5, 1.0)]
    return [
        el("text", series.label, class_="plot-label", x=PAD_L, y=16),
        el("line", class_="axis-line", x1=PAD_L, x2=PAD_L, y1=PAD_T, y2=bottom),
        el("line", class_="axis-line", x1=PAD_L, x2=PAD_L + PLOT_W, y1=bottom, y2=bottom),
        *(
            el(
                "text",
                format_seconds(value),
                class_="axis",
                x=PAD_L - 6,
                y=frame.y(value) + 4,
                text_anchor="end",
            )
            for value in times
        ),
        *(
            el("text", str(c), class_="axis", x=frame.x(c), y=bottom + 16, text_anchor="middle")
            for c in counts
        ),
        el(
            "text",
            f"devices (log₂ scale) · median step time, {series.boundary.value}",
            class_="axis",
            x=PAD_L + PLOT_W / 2,
            y=H - 8,
            text_anchor="middle",
        ),
    ]


def _measured_and_ideal(mode: str, points: list[ScalingPoint], frame: _Frame) -> list[El]:
    """One scaling's measured line, the ideal one from its first point, and its points."""
    first = points[0]
    ideal = " ".join(
        f"{frame.x(p.devices):.1f},{frame.y(_ideal(mode, first, p.devices)):.1f}" for p in points
    )
    measured = " ".join(
        f"{frame.x(p.devices):.1f},{frame.y(p.median_s or 0.0):.1f}" for p in points
    )
    return [
        el(
            "polyline",
            title=f"ideal {mode} scaling from the {first.devices}-device point",
            class_="ideal",
            points=ideal,
        ),
        el("polyline", class_="measured", points=measured),
        *(
            el(
                "circle",
                title=f"{mode}, {p.devices} device(s): median {format_seconds(p.median_s or 0.0)} "
                f"over {len(p.samples_s)} steps",
                class_="point",
                cx=frame.x(p.devices),
                cy=frame.y(p.median_s or 0.0),
                r=4,
            )
            for p in points
        ),
    ]


def _legend(mode: str, row: int) -> list[El]:
    """One scaling's entry in the legend, the `row`th from the top."""
    top = PAD_T + 14 + row * ROW_H
    return [
        el("line", class_="measured", x1=LEGEND_X, x2=LEGEND_X + 20, y1=top, y2=top),
        el("text", mode, class_="legend", x=LEGEND_X + 26, y=top + 4),
        el(
            "text",
            "global fixed" if mode == "strong" else "per-device fixed",
            class_="legend-note",
            x=LEGEND_X + 26,
            y=top + 18,
        ),
    ]


def scaling_svg(series: ScalingSeries, title_id: str = "scaling") -> Chart | None:
    """The series as a chart; None when no point has a time."""
    lines = _by_mode(series)
    if not lines:
        return None
    counts = sorted({p.devices for points in lines.values() for p in points})
    frame = _Frame.around(counts, [p.median_s or 0.0 for ps in lines.values() for p in ps])
    series_groups = [
        el(
            "g",
            children=(*_measured_and_ideal(mode, points, frame), *_legend(mode, row)),
            class_=f"series {mode}",
            data_mode=mode,
        )
        for row, (mode, points) in enumerate(lines.items())
    ]
    parts = [
        *_axes(series, counts, frame),
        *series_groups,
        el(
            "text",
            "dotted: ideal",
            class_="legend-note",
            x=LEGEND_X,
            y=PAD_T + 14 + len(lines) * ROW_H,
        ),
    ]
    return Chart("scaling", W, H, title_id, _title(series, list(lines)), parts)
