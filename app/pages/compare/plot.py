"""The sample distributions of a comparison: every run's samples, side by side.

Each run is a column of dots (its samples at the compared boundary) with a tick at its
median; side A's runs come first, then side B's, in two colours. For a comparable pair
the scale is shared (one SVG), so the run-to-run spread (which the interval is about) is
visible beside the sample spread within each run (which it is not). A pair the guard
refuses is never set on one axis: each side gets its own chart, titled with its own
boundary (a yardstick: a figure is set only against one measured on the same boundary).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.pages.charts import Chart, El, el
from app.pages.runs.plots import format_seconds, seconds_axis

W, H = 640, 240
PAD_L, PAD_R, PAD_T, PAD_B = 72, 16, 20, 40
MAX_DOTS = 400
"""Samples drawn per run at most (evenly thinned beyond), so the SVG stays small."""


@dataclass(frozen=True)
class RunSamples:
    """One run's samples at the compared boundary."""

    side: str  # "A" or "B"
    run_id: str
    samples: list[float]
    median: float


def distributions_svg(
    runs: list[RunSamples], boundary: str, title_id: str = "dists"
) -> Chart | None:
    """The strip chart of every run's samples; None when no run has samples."""
    runs = [r for r in runs if r.samples]
    if not runs:
        return None
    values = [v for r in runs for v in r.samples]
    lo, hi = min(values), max(values)
    if hi <= lo:
        hi = lo * 1.01 + 1e-12
    span = hi - lo
    lo, hi = max(0.0, lo - 0.05 * span), hi + 0.05 * span
    plot_w, plot_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    column = plot_w / len(runs)

    def y(v: float) -> float:
        return PAD_T + plot_h * (1 - (v - lo) / (hi - lo))

    sides = sorted({r.side for r in runs})
    title = (
        f"Samples of the {boundary} boundary, run by run: "
        f"{sum(1 for r in runs if r.side == 'A')} runs of side A, "
        f"{sum(1 for r in runs if r.side == 'B')} of side B"
        if len(sides) > 1
        else f"Side {sides[0]}: samples of the {boundary} boundary, run by run ({len(runs)} "
        f"run{'' if len(runs) == 1 else 's'})"
    )
    parts: list[El] = []
    for i, r in enumerate(runs):
        left = PAD_L + i * column
        centre = left + column / 2
        step = max(1, len(r.samples) // MAX_DOTS)
        shown = r.samples[::step]
        spread = min(column * 0.3, 14.0)
        for k, v in enumerate(shown):
            # A fixed, repeating offset spreads the dots without randomness.
            dx = spread * (((k * 7) % 11) / 10.0 - 0.5)
            parts.append(
                el("circle", class_=f"dot side-{r.side.lower()}", cx=centre + dx, cy=y(v), r=2)
            )
        parts.append(
            el(
                "line",
                title=f"run {r.run_id} (side {r.side}): median "
                f"{format_seconds(r.median)}, {len(r.samples)} samples",
                class_="run-median",
                x1=centre - column * 0.35,
                x2=centre + column * 0.35,
                y1=y(r.median),
                y2=y(r.median),
            )
        )
        parts.append(
            el(
                "text",
                f"{r.side}{sum(1 for q in runs[: i + 1] if q.side == r.side)}",
                class_="axis",
                x=centre,
                y=H - PAD_B + 16,
                text_anchor="middle",
            )
        )
    first = "A1…, B1…" if len(sides) > 1 else f"{sides[0]}1…"
    caption = f"runs ({first}): each dot a sample, each bar a run's median ({boundary})"
    box = (W, H, PAD_L, PAD_R, PAD_T, PAD_B)
    parts.extend(seconds_axis(y, lo, hi, caption, box=box))
    return Chart("dists", W, H, title_id, title, parts)


@dataclass(frozen=True)
class Panel:
    """One chart of the comparison's samples and the heading the page gives it."""

    heading: str
    chart: Chart


def distribution_panels(
    runs: list[RunSamples], comparable: bool, boundary_a: str | None, boundary_b: str | None
) -> list[Panel]:
    """The samples as the page draws them: one shared axis when the guard lets the sides
    be compared; otherwise a chart per side (none for a side without samples), each on
    its own axis and titled with its own boundary."""
    if comparable:
        shared = distributions_svg(runs, boundary_a or "?")
        return [Panel(f"Both sides at {boundary_a}", shared)] if shared else []
    panels = []
    for name, boundary in (("A", boundary_a), ("B", boundary_b)):
        mine = [r for r in runs if r.side == name]
        chart = distributions_svg(mine, boundary or "?", title_id=f"dists-{name.lower()}")
        if chart is not None:
            panels.append(Panel(f"Side {name} at {boundary or '?'}", chart))
    return panels
