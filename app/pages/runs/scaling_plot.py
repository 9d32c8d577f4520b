"""A scaling series as a server-rendered SVG: step time against device count.

Strong scaling (global workload fixed) and weak scaling (per-device workload fixed) are
drawn as two labelled lines over device counts 1, 2, 4, … on a log₂ axis, each with the
line its ideal would follow from its one-device point (strong: time ÷ devices; weak:
flat). Every point is the median of whole-step times at the host-sync boundary.
"""

from __future__ import annotations

import math

from app.pages.charts import Chart, El, el
from app.pages.runs.plots import format_seconds
from workers.protocol import ScalingPoint, ScalingSeries

W, H = 760, 300
PAD_L, PAD_R, PAD_T, PAD_B = 72, 170, 40, 44

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


def scaling_svg(series: ScalingSeries, title_id: str = "scaling") -> Chart | None:
    """The series as a chart; None when no point has a time."""
    lines = _by_mode(series)
    if not lines:
        return None
    counts = sorted({p.devices for points in lines.values() for p in points})
    times = [p.median_s or 0.0 for points in lines.values() for p in points]
    top = max(times) * 1.15
    plot_w, plot_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    low, high = math.log2(counts[0]), math.log2(counts[-1])
    span = high - low or 1.0

    def x(devices: int) -> float:
        if high == low:
            return PAD_L + plot_w / 2
        return PAD_L + plot_w * (math.log2(devices) - low) / span

    def y(seconds: float) -> float:
        return PAD_T + plot_h * (1 - min(seconds, top) / top)

    modes = " and ".join(MODE_LABELS.get(m, m) for m in lines)
    title = (
        f"{modes}: median step time ({series.boundary.value}) against device count. {series.label}"
    )
    parts: list[El] = [
        el("text", series.label, class_="plot-label", x=PAD_L, y=16),
        el("line", class_="axis-line", x1=PAD_L, x2=PAD_L, y1=PAD_T, y2=PAD_T + plot_h),
        el(
            "line",
            class_="axis-line",
            x1=PAD_L,
            x2=PAD_L + plot_w,
            y1=PAD_T + plot_h,
            y2=PAD_T + plot_h,
        ),
    ]
    for frac in (0.0, 0.5, 1.0):
        value = top * frac
        parts.append(
            el(
                "text",
                format_seconds(value),
                class_="axis",
                x=PAD_L - 6,
                y=y(value) + 4,
                text_anchor="end",
            )
        )
    for count in counts:
        parts.append(
            el(
                "text",
                str(count),
                class_="axis",
                x=x(count),
                y=PAD_T + plot_h + 16,
                text_anchor="middle",
            )
        )
    parts.append(
        el(
            "text",
            f"devices (log₂ scale) · median step time, {series.boundary.value}",
            class_="axis",
            x=PAD_L + plot_w / 2,
            y=H - 8,
            text_anchor="middle",
        )
    )
    for row, (mode, points) in enumerate(lines.items()):
        first = points[0]
        ideal = " ".join(
            f"{x(p.devices):.1f},{y(_ideal(mode, first, p.devices)):.1f}" for p in points
        )
        measured = " ".join(f"{x(p.devices):.1f},{y(p.median_s or 0.0):.1f}" for p in points)
        children: list[El] = [
            el(
                "polyline",
                title=f"ideal {mode} scaling from the {first.devices}-device point",
                class_="ideal",
                points=ideal,
            ),
            el("polyline", class_="measured", points=measured),
        ]
        for p in points:
            median = format_seconds(p.median_s or 0.0)
            children.append(
                el(
                    "circle",
                    title=f"{mode}, {p.devices} device(s): median {median} "
                    f"over {len(p.samples_s)} steps",
                    class_="point",
                    cx=x(p.devices),
                    cy=y(p.median_s or 0.0),
                    r=4,
                )
            )
        legend_y = PAD_T + 14 + row * 34
        children += [
            el(
                "line",
                class_="measured",
                x1=W - PAD_R + 12,
                x2=W - PAD_R + 32,
                y1=legend_y,
                y2=legend_y,
            ),
            el("text", mode, class_="legend", x=W - PAD_R + 38, y=legend_y + 4),
            el(
                "text",
                "global fixed" if mode == "strong" else "per-device fixed",
                class_="legend-note",
                x=W - PAD_R + 38,
                y=legend_y + 18,
            ),
        ]
        parts.append(el("g", children=tuple(children), class_=f"series {mode}", data_mode=mode))
    parts.append(
        el(
            "text",
            "dotted: ideal",
            class_="legend-note",
            x=W - PAD_R + 12,
            y=PAD_T + 14 + len(lines) * 34,
        )
    )
    return Chart("scaling", W, H, title_id, title, parts)
