"""The shape sweep's trade-off, side by side: one SVG, four panels, a bar per policy.

Compilations counted, total compile time, padding waste (extra FLOPs, %) and the
steady-state time of one pass over every size. Each panel has its own scale and its
unit; the numbers are printed on the bars, so nothing depends on reading a bar's height.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.pages.charts import Chart, El, el
from app.pages.runs.plots import format_seconds
from workers.protocol import SweepPolicy, SweepResult

W, H = 760, 240
PANEL_GAP = 18
PAD_T, PAD_B = 40, 52
BAR_W = 40
PLOT_H = H - PAD_T - PAD_B
BOTTOM = PAD_T + PLOT_H
"""The panels' common baseline."""

Panel = tuple[str, Callable[[SweepPolicy], float | None], Callable[[float], str]]
"""A panel's name, the figure it shows of a policy (None: not known) and its format."""


def _panels() -> list[Panel]:
    """The four panels, left to right."""
    return [
        ("compilations", lambda p: float(p.compilations), lambda v: f"{v:.0f}"),
        ("compile time", lambda p: p.compile_s, format_seconds),
        ("padding waste", lambda p: p.padding_waste_pct, lambda v: f"{v:.1f} %"),
        ("steady pass", lambda p: p.steady_pass_s, format_seconds),
    ]


def _missing(sweep: SweepResult) -> str:
    """The word for a time a policy lacks: the times of a sweep that failed its check are
    withheld, not merely absent."""
    return "not run" if all(p.first_pass_s is not None for p in sweep.policies) else "withheld"


def _title(sweep: SweepResult) -> str:
    """The chart's accessible title: how many calls, which policies, what is shown."""
    names = ", ".join(p.policy for p in sweep.policies)
    return (
        f"Shape sweep of {len(sweep.sizes)} calls, bucketing {names}: "
        "compilations, compile time, padding waste and steady-state pass time"
    )


def _column(policy: str, j: int, height: float | None, shown: str, cx: float) -> list[El]:
    """The `j`th policy in a panel, centred on `cx`: its bar `height` px tall with its
    figure `shown` above it, or (no height) the word for a missing figure; then its name."""
    if height is None:
        figure = [el("text", shown, class_="value", x=cx, y=BOTTOM - 6, text_anchor="middle")]
    else:
        figure = [
            el(
                "rect",
                title=f"{policy}: {shown}",
                class_=f"bar bar-{j}",
                x=cx - BAR_W / 2,
                y=BOTTOM - height,
                width=BAR_W,
                height=height,
            ),
            el("text", shown, class_="value", x=cx, y=BOTTOM - height - 5, text_anchor="middle"),
        ]
    name = el("text", policy, class_="axis", x=cx, y=BOTTOM + 16, text_anchor="middle")
    return [*figure, name]


def _panel(sweep: SweepResult, panel: Panel, left: float, width: float) -> list[El]:
    """One panel, `width` px wide from `left`: its name, baseline and one column a policy,
    scaled to its highest figure."""
    name, value, fmt = panel
    values = [value(p) for p in sweep.policies]
    top = max((v for v in values if v is not None), default=0.0) or 1.0
    step = width / max(1, len(values))
    missing = _missing(sweep)
    columns = [
        part
        for j, (policy, v) in enumerate(zip(sweep.policies, values, strict=True))
        for part in _column(
            policy.policy,
            j,
            None if v is None else max(1.0, PLOT_H * v / top),
            missing if v is None else fmt(v),
            left + step * (j + 0.5),
        )
    ]
    return [
        el("text", name, class_="panel-title", x=left + width / 2, y=18, text_anchor="middle"),
        el("line", class_="axis-line", x1=left, x2=left + width, y1=BOTTOM, y2=BOTTOM),
        *columns,
    ]


def sweep_svg(sweep: SweepResult, title_id: str = "sweep") -> Chart:
    """The four panels as a chart (policies in the order they ran)."""
    panels = _panels()
    panel_w = (W - PANEL_GAP * (len(panels) + 1)) / len(panels)
    drawn = [
        part
        for i, panel in enumerate(panels)
        for part in _panel(sweep, panel, PANEL_GAP + i * (panel_w + PANEL_GAP), panel_w)
    ]
    note = el(
        "text",
        "each panel has its own scale; steady pass = every size once, all compiled "
        "(host-sync per call)",
        class_="axis",
        x=W // 2,
        y=H - 10,
        text_anchor="middle",
    )
    return Chart("sweep", W, H, title_id, _title(sweep), [*drawn, note])


def sweep_view(sweep: SweepResult | None) -> dict[str, Any] | None:
    """What the run page shows for a shape sweep: the chart and a table of the figures."""
    if sweep is None:
        return None
    missing = _missing(sweep)
    rows = [
        {
            "policy": p.policy,
            "distinct": len(set(p.padded_sizes)),
            "traces": p.traces,
            "compilations": p.compilations,
            "compile": format_seconds(p.compile_s) if p.compile_s is not None else "not reported",
            "first_pass": format_seconds(p.first_pass_s) if p.first_pass_s else "withheld",
            "waste": f"{p.padding_waste_pct:.1f} %",
            "steady_pass": format_seconds(p.steady_pass_s) if p.steady_pass_s else missing,
            "steady_call": format_seconds(p.steady_call_s) if p.steady_call_s else missing,
        }
        for p in sweep.policies
    ]
    shown = ", ".join(str(s) for s in sweep.sizes[:40])
    more = f" … ({len(sweep.sizes)} in all)" if len(sweep.sizes) > 40 else ""
    return {
        "chart": sweep_svg(sweep),
        "rows": rows,
        "op": sweep.op,
        "sizes": shown + more,
        "calls": len(sweep.sizes),
        "note": sweep.note,
    }
