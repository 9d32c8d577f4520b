"""A run's roofline, drawn against the ceilings its own worker measured (never a datasheet).

x is arithmetic intensity (analytic FLOPs per byte moved), y is FLOP/s, both on log
scales. The memory roof is the worker's measured copy bandwidth times x; the compute
roof is its measured matmul rate for the run's dtype; the run is one point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.pages.charts import Chart, El, el
from workers.protocol import Ceilings, RunResult

ROOF_SLACK = 0.02
"""How far above a roof a point may sit before the roof is called wrong (timer noise)."""

W, H = 760, 300
NARROW_W = 300
"""The width drawn for a phone (shown below 700 px instead of the wide one)."""
PAD_L, PAD_R, PAD_T, PAD_B = 84, 24, 34, 44


@dataclass(frozen=True)
class Roofline:
    """The roofs (from measured ceilings) and a run's point under them."""

    bandwidth: float
    """Memory roof: bytes per second of the worker's measured copy."""
    peak: float
    """Compute roof: FLOP/s of the worker's measured matmul in `dtype`."""
    dtype: str
    intensity: float
    """The run's analytic FLOPs per byte."""
    achieved: float
    """The run's FLOP/s at the median of its main boundary."""
    label: str
    notes: tuple[str, ...] = ()

    @property
    def ridge(self) -> float:
        """The intensity where the memory roof meets the compute roof."""
        return self.peak / self.bandwidth

    @property
    def attainable(self) -> float:
        """What the roofs allow at the run's intensity."""
        return min(self.peak, self.bandwidth * self.intensity)

    @property
    def above_roof(self) -> bool:
        """The point lies above what the measured roofs allow: a ceiling is wrong."""
        return self.achieved > self.attainable * (1 + ROOF_SLACK)

    @property
    def bound(self) -> str:
        return "memory" if self.intensity < self.ridge else "compute"


def measured_label(ceilings: Ceilings) -> str:
    """'measured on worker W (kind) at T, best of N rounds' — where the roofs came from."""
    who = ceilings.worker or "(unnamed)"
    label = f"measured on worker {who} ({ceilings.device_kind}) at {ceilings.measured_at}"
    if ceilings.rounds > 1:
        label += f", best of {ceilings.rounds} rounds"
    if ceilings.updated_at and ceilings.updated_at != ceilings.measured_at:
        label += f", last re-measured at {ceilings.updated_at}"
    return label


def build_roofline(run: RunResult) -> Roofline | None:
    """The roofline of a valid run with rates, if its worker sent measured ceilings."""
    ceilings, rates = run.ceilings, run.rates
    if ceilings is None or rates is None or not run.valid:
        return None
    if not ceilings.copy_bytes_per_s or not rates.flops_per_s or rates.bytes <= 0:
        return None
    notes: list[str] = []
    wanted = str(run.params.get("dtype") or "float32")
    dtype = wanted if wanted in ceilings.matmul_flops_per_s else "float32"
    peak = ceilings.matmul_flops_per_s.get(dtype)
    if not peak:
        return None
    if dtype != wanted:
        notes.append(f"No {wanted} matmul was measured on this worker; the roof is float32's.")
    if ceilings.device_kind != run.environment.device_kind:
        notes.append(
            f"The ceilings were measured on {ceilings.device_kind}, the run ran on "
            f"{run.environment.device_kind}."
        )
    return Roofline(
        bandwidth=ceilings.copy_bytes_per_s,
        peak=peak,
        dtype=dtype,
        intensity=rates.flops / rates.bytes,
        achieved=rates.flops_per_s,
        label=measured_label(ceilings),
        notes=tuple(notes),
    )


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def roofline_svg(r: Roofline, title_id: str = "roofline", width: int = W) -> Chart:
    """The roofline as a chart, log-log, labelled with where its roofs came from, `width`
    wide (a narrow one says less in its captions, at the same text size)."""
    narrow = width < W
    x_lo = 10 ** math.floor(math.log10(min(r.intensity, r.ridge)) - 1)
    x_hi = 10 ** math.ceil(math.log10(max(r.intensity, r.ridge)) + 1)
    y_hi = 10 ** math.ceil(math.log10(max(r.peak, r.achieved) * 1.5))
    y_lo = 10 ** math.floor(math.log10(min(r.achieved, r.bandwidth * x_lo)))
    plot_w, plot_h = width - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(v: float) -> float:
        return PAD_L + plot_w * (math.log10(v) - math.log10(x_lo)) / math.log10(x_hi / x_lo)

    def y(v: float) -> float:
        return PAD_T + plot_h * (1 - (math.log10(v) - math.log10(y_lo)) / math.log10(y_hi / y_lo))

    title = (
        f"Roofline {r.label}: memory roof {_si(r.bandwidth, 'B/s')}, compute roof "
        f"{_si(r.peak, 'FLOP/s')} ({r.dtype}); this run {_si(r.achieved, 'FLOP/s')} at "
        f"{r.intensity:.3g} FLOP/byte"
    )
    parts: list[El] = [
        el(
            "text",
            "Roofs measured on this worker" if narrow else f"Roofs {r.label}; not datasheet peaks",
            class_="caption",
            x=PAD_L,
            y=18,
        )
    ]
    for exp in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1):
        gx = x(10.0**exp)
        parts.append(el("line", class_="grid", x1=gx, x2=gx, y1=PAD_T, y2=H - PAD_B))
        parts.append(
            el(
                "text",
                f"{10.0**exp:g}",
                class_="axis",
                x=gx,
                y=H - PAD_B + 16,
                text_anchor="middle",
            )
        )
    for exp in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1):
        gy = y(10.0**exp)
        parts.append(el("line", class_="grid", x1=PAD_L, x2=width - PAD_R, y1=gy, y2=gy))
        parts.append(
            el(
                "text",
                _si(10.0**exp, "FLOP/s"),
                class_="axis",
                x=PAD_L - 6,
                y=gy + 4,
                text_anchor="end",
            )
        )
    ridge = r.ridge
    mid = math.sqrt(x_lo * ridge)  # where the memory roof's label sits, above the line
    points = (
        f"{x(x_lo):.1f},{y(r.bandwidth * x_lo):.1f} "
        f"{x(ridge):.1f},{y(r.peak):.1f} {x(x_hi):.1f},{y(r.peak):.1f}"
    )
    parts += [
        el("polyline", class_="roof", points=points),
        el(
            "text",
            f"{r.dtype} matmul" if narrow else f"{r.dtype} matmul {_si(r.peak, 'FLOP/s')}",
            class_="roof-label",
            x=x(x_hi) - 4,
            y=y(r.peak) - 6,
            text_anchor="end",
        ),
        el(
            "text",
            "copy" if narrow else f"copy {_si(r.bandwidth, 'B/s')}",
            class_="roof-label",
            x=x(mid) - 6,
            y=y(r.bandwidth * mid) - 6,
            text_anchor="end",
        ),
        el(
            "circle",
            title=f"this run: {_si(r.achieved, 'FLOP/s')} at {r.intensity:.3g} FLOP/byte",
            class_="point",
            cx=x(r.intensity),
            cy=y(r.achieved),
            r=5,
        ),
        el(
            "text",
            "FLOP per byte (log)"
            if narrow
            else "arithmetic intensity (analytic FLOPs per byte, log scale)",
            class_="axis",
            x=PAD_L + plot_w / 2,
            y=H - 8,
            text_anchor="middle",
        ),
    ]
    data = {"bandwidth": repr(r.bandwidth), "peak": repr(r.peak)}
    return Chart("roofline", width, H, title_id, title, parts, data)


def roofline_view(run: RunResult) -> dict[str, Any] | None:
    """What the run page shows: the chart, the figures behind it and any caveats."""
    r = build_roofline(run)
    if r is None:
        return None
    return {
        "chart": roofline_svg(r),
        "narrow_chart": roofline_svg(r, "roofline-narrow", NARROW_W),
        "label": r.label,
        "dtype": r.dtype,
        "bandwidth": _si(r.bandwidth, "B/s"),
        "peak": _si(r.peak, "FLOP/s"),
        "achieved": _si(r.achieved, "FLOP/s"),
        "intensity": f"{r.intensity:.3g}",
        "ridge": f"{r.ridge:.3g}",
        "bound": r.bound,
        # A point above a measured roof says the roof is wrong, not that the run beat it.
        "fraction": None if r.above_roof else f"{r.achieved / r.attainable:.0%}",
        "above_roof": (
            f"This run lies {r.achieved / r.attainable:.2g}× above the roof there, which a "
            "measured ceiling should make impossible: the ceiling was under-measured "
            "(a busy worker, or a copy or matmul slower than this workload's kernels), so no "
            "fraction of it is given."
            if r.above_roof
            else None
        ),
        "method": run.ceilings.method if run.ceilings is not None else "",
        "notes": list(r.notes),
    }
