"""Server-rendered SVG charts of measured samples. No JavaScript, no chart library."""

from __future__ import annotations

from collections.abc import Callable

from app.pages.charts import Chart, El, el, seconds_ticks
from app.web.units import format_seconds
from workers.protocol import Measurement

__all__ = ["format_seconds", "samples_svg", "seconds_axis"]  # format_seconds: from app.web.units

W, H = 640, 220
NARROW_W = 300
"""The width drawn for a phone (shown below 700 px instead of the wide one): the same
text sizes, fewer pixels per sample."""
PAD_L, PAD_R, PAD_T, PAD_B = 72, 16, 16, 36


def seconds_axis(
    y: Callable[[float], float],
    lo: float,
    hi: float,
    caption: str,
    *,
    box: tuple[int, int, int, int, int, int] = (W, H, PAD_L, PAD_R, PAD_T, PAD_B),
) -> list[El]:
    """A time axis: labelled ticks at round times, the axis line and a caption below.

    `box` is the chart's (width, height, pad left, pad right, pad top, pad bottom); the
    labels fit the left padding, 2 px short of the chart's edge.
    """
    width, height, pad_l, pad_r, pad_t, pad_b = box
    ticks = [
        el("text", text, class_="axis", x=pad_l - 6, y=y(v) + 4, text_anchor="end")
        for v, text in seconds_ticks(lo, hi, room=pad_l - 8)
    ]
    middle = pad_l + (width - pad_l - pad_r) / 2
    return [
        *ticks,
        el("line", class_="axis-line", x1=pad_l, x2=pad_l, y1=pad_t, y2=height - pad_b),
        el("text", caption, class_="axis", x=middle, y=height - 8, text_anchor="middle"),
    ]


def samples_svg(m: Measurement, *, title_id: str, width: int = W) -> Chart | None:
    """Every sample in order, with the median line and the IQR band marked, `width` wide."""
    samples = m.samples_s
    if not samples:
        return None
    lo, hi = min(samples), max(samples)
    if hi == lo:
        hi = lo * 1.01 + 1e-12
    span = hi - lo
    lo, hi = max(0.0, lo - span * 0.05), hi + span * 0.05
    n = len(samples)
    plot_w, plot_h = width - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(i: int) -> float:
        return PAD_L + (plot_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return PAD_T + plot_h * (1 - (v - lo) / (hi - lo))

    label = f"{n} samples of the {m.boundary.value} boundary" + (
        f", {m.calls_per_sample} calls each" if m.calls_per_sample > 1 else ""
    )
    parts: list[El] = []
    if m.stats is not None:
        q1, q3, med = m.stats.q1, m.stats.q3, m.stats.median
        parts.append(
            el(
                "rect",
                title=f"IQR {format_seconds(q1)} – {format_seconds(q3)}",
                class_="iqr",
                x=PAD_L,
                y=y(q3),
                width=plot_w,
                height=max(1.0, y(q1) - y(q3)),
            )
        )
        parts.append(el("line", class_="median", x1=PAD_L, x2=width - PAD_R, y1=y(med), y2=y(med)))
        parts.append(
            el(
                "text",
                f"median {format_seconds(med)}",
                class_="median-label",
                x=width - PAD_R - 4,
                y=y(med) - 4,
                text_anchor="end",
            )
        )
    radius = 2.5 if n <= 200 else 1.5
    parts.extend(
        el("circle", class_="sample", cx=x(i), cy=y(v), r=radius) for i, v in enumerate(samples)
    )
    caption = f"sample 1 … {n} in the order taken ({m.boundary.value})"
    if width < W:
        caption = f"sample 1 … {n}, in order"
    parts.extend(seconds_axis(y, lo, hi, caption, box=(width, H, PAD_L, PAD_R, PAD_T, PAD_B)))
    return Chart("samples", width, H, title_id, label, parts)
