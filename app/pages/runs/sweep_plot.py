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


def _panels() -> list[tuple[str, Callable[[SweepPolicy], float | None], Callable[[float], str]]]:
    return [
        ("compilations", lambda p: float(p.compilations), lambda v: f"{v:.0f}"),
        ("compile time", lambda p: p.compile_s, format_seconds),
        ("padding waste", lambda p: p.padding_waste_pct, lambda v: f"{v:.1f} %"),
        ("steady pass", lambda p: p.steady_pass_s, format_seconds),
    ]


def sweep_svg(sweep: SweepResult, title_id: str = "sweep") -> Chart:
    """The four panels as a chart (policies in the order they ran)."""
    panels = _panels()
    panel_w = (W - PANEL_GAP * (len(panels) + 1)) / len(panels)
    plot_h = H - PAD_T - PAD_B
    names = ", ".join(p.policy for p in sweep.policies)
    missing = "not run" if all(p.first_pass_s is not None for p in sweep.policies) else "withheld"
    title = (
        f"Shape sweep of {len(sweep.sizes)} calls, bucketing {names}: "
        "compilations, compile time, padding waste and steady-state pass time"
    )
    parts: list[El] = []
    for i, (name, value, fmt) in enumerate(panels):
        left = PANEL_GAP + i * (panel_w + PANEL_GAP)
        values = [value(p) for p in sweep.policies]
        top = max((v for v in values if v is not None), default=0.0) or 1.0
        parts.append(
            el("text", name, class_="panel-title", x=left + panel_w / 2, y=18, text_anchor="middle")
        )
        parts.append(
            el(
                "line",
                class_="axis-line",
                x1=left,
                x2=left + panel_w,
                y1=PAD_T + plot_h,
                y2=PAD_T + plot_h,
            )
        )
        step = panel_w / max(1, len(values))
        for j, (policy, v) in enumerate(zip(sweep.policies, values, strict=True)):
            cx = left + step * (j + 0.5)
            if v is None:
                parts.append(
                    el(
                        "text",
                        missing,
                        class_="value",
                        x=cx,
                        y=PAD_T + plot_h - 6,
                        text_anchor="middle",
                    )
                )
            else:
                height = max(1.0, plot_h * v / top)
                y0 = PAD_T + plot_h - height
                parts.append(
                    el(
                        "rect",
                        title=f"{policy.policy}: {fmt(v)}",
                        class_=f"bar bar-{j}",
                        x=cx - BAR_W / 2,
                        y=y0,
                        width=BAR_W,
                        height=height,
                    )
                )
                parts.append(
                    el("text", fmt(v), class_="value", x=cx, y=y0 - 5, text_anchor="middle")
                )
            parts.append(
                el(
                    "text",
                    policy.policy,
                    class_="axis",
                    x=cx,
                    y=PAD_T + plot_h + 16,
                    text_anchor="middle",
                )
            )
    parts.append(
        el(
            "text",
            "each panel has its own scale; steady pass = every size once, all compiled "
            "(host-sync per call)",
            class_="axis",
            x=W // 2,
            y=H - 10,
            text_anchor="middle",
        )
    )
    return Chart("sweep", W, H, title_id, title, parts)


def sweep_view(sweep: SweepResult | None) -> dict[str, Any] | None:
    """What the run page shows for a shape sweep: the chart and a table of the figures."""
    if sweep is None:
        return None
    # Times of a sweep that failed its check are withheld, not merely absent.
    missing = "not run" if all(p.first_pass_s is not None for p in sweep.policies) else "withheld"
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
