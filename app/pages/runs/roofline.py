"""A run's roofline, drawn against the ceilings its own worker measured (never a datasheet).

x is arithmetic intensity (FLOPs per byte moved, as the run's rates count them: analytic
for a catalog workload, the compiler's cost analysis for an uploaded program), y is
FLOP/s, both on log scales. The memory roof is the worker's measured copy bandwidth
times x; the compute roof is its measured matmul rate for the dtype of the run's inputs.
The run is one point, drawn only when its rate was timed on the boundary the roofs were
(a yardstick: a figure is set only against one measured on the same boundary).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

from app.pages.charts import Chart, El, el
from app.web.units import format_seconds
from workers.protocol import BoundaryId, Ceilings, Rates, RunResult

ROOF_SLACK = 0.02
"""How far above a roof a point may sit before the roof is called wrong (timer noise)."""

W, H = 760, 300
NARROW_W = 300
"""The width drawn for a phone (shown below 700 px instead of the wide one)."""
PAD_L, PAD_R, PAD_T, PAD_B = 84, 24, 34, 44

ANALYTIC = "analytic"
COUNTS = {ANALYTIC: "analytic counts"}
COMPILER_COUNTS = "the compiler's counts (XLA cost analysis, per device)"
"""How the page names a rate's counts: any source but "analytic" is XLA's cost analysis."""

FLOAT_DTYPE = re.compile(r"^b?float(\d+)")
"""A floating dtype as JAX spells it (float32, bfloat16, float8_e4m3fn): its bit width."""


@dataclass(frozen=True)
class Roofline:
    """The roofs (from measured ceilings) and a run's point under them."""

    bandwidth: float
    """Memory roof: bytes per second of the worker's measured copy."""
    peak: float
    """Compute roof: FLOP/s of the worker's measured matmul in `dtype`."""
    dtype: str
    intensity: float
    """The run's FLOPs per byte (see `counts`)."""
    achieved: float | None
    """The run's FLOP/s at the median of its rates' boundary; None when that boundary is
    not the roofs' (`withheld` says so), since then no point may be drawn."""
    label: str
    notes: tuple[str, ...] = ()
    counts: str = COUNTS[ANALYTIC]
    """Where the FLOPs and bytes come from, as the page names it."""
    withheld: str | None = None
    """Why no point is drawn: the rate's boundary and the roofs' differ."""

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
        return self.achieved is not None and self.achieved > self.attainable * (1 + ROOF_SLACK)

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


def counts_of(rates: Rates) -> str:
    """How the page names where a rate's counts come from."""
    return COUNTS.get(rates.source, COMPILER_COUNTS)


def roof_dtype(run: RunResult) -> tuple[str, tuple[str, ...]]:
    """The dtype whose matmul roof bounds the run, and a note when its inputs mix floats.

    The floating dtypes among the run's inputs choose (integer inputs, such as token ids,
    do not); of several, the one holding the most input bytes. Without floating inputs
    recorded, the run's `dtype` parameter, then float32.
    """
    held: dict[str, float] = {}
    for found in run.inputs:
        match = FLOAT_DTYPE.match(found.dtype)
        if match:
            size = math.prod(found.shape) * int(match.group(1)) / 8
            held[found.dtype] = held.get(found.dtype, 0.0) + size
    if not held:
        return str(run.params.get("dtype") or "float32"), ()
    wanted = max(sorted(held), key=lambda d: held[d])
    if len(held) == 1:
        return wanted, ()
    others = " and ".join(d for d in sorted(held) if d != wanted)
    note = (
        f"The inputs mix floating dtypes: the compute roof is chosen by {wanted}, which "
        f"holds the most input bytes ({held[wanted] / sum(held.values()):.0%}); the {others} "
        "inputs' work is set against it too, so no single measured roof bounds this "
        "program exactly."
    )
    return wanted, (note,)


def _encloses(boundary: BoundaryId | None, calls: int) -> str:
    """What a rate's or roof's boundary encloses, in a few words ("8 calls, one sync")."""
    if boundary is None:
        return ""
    return {
        BoundaryId.HOST_SYNC: "one call at a time, synced",
        BoundaryId.HOST_THROUGHPUT: f"{calls} calls, one sync",
        BoundaryId.DEVICE_EVENTS: "a CUDA event pair: device time only",
        BoundaryId.APPLICATION: "transfer-in + call + transfer-out",
    }.get(boundary, "")


def boundary_mismatch(run: RunResult, rates: Rates, ceilings: Ceilings) -> str | None:
    """Why the run's rate cannot be set against its roofs, or None when both were timed
    on one boundary."""
    if rates.boundary == ceilings.boundary:
        return None
    calls = next(
        (
            m.calls_per_sample
            for m in run.measurements
            if m.boundary == rates.boundary and m.subject == rates.subject
        ),
        1,
    )
    rate_what, roof_what = _encloses(rates.boundary, calls), _encloses(ceilings.boundary, 1)
    rate = rates.boundary.value if rates.boundary is not None else "on no boundary"
    return (
        f"This run's rate is {rate}{f' ({rate_what})' if rate_what else ''}; the roofs "
        f"were measured {ceilings.boundary.value}{f' ({roof_what})' if roof_what else ''}: "
        "no point is drawn, since the two enclose different things."
    )


def _point(
    run: RunResult, rates: Rates, ceilings: Ceilings, notes: list[str]
) -> tuple[float | None, str | None]:
    """The run's FLOP/s against its roofs, and why none is drawn: on roofs a chip measured
    in its own time, the run's own device time (host-sync of a small program is mostly the
    host); else the rate on its own boundary, if it is the roofs'."""
    device = next(
        (m for m in run.measurements if m.boundary is BoundaryId.DEVICE_TIME and m.samples_s),
        None,
    )
    if ceilings.boundary is BoundaryId.DEVICE_TIME and device is not None and rates.flops:
        median = statistics.median(device.samples_s)
        notes.append(
            "The point and the roofs are in device time (the chip's own span per call, "
            f"median {format_seconds(median)}): host-sync would add the host's dispatch, "
            "which for a small program is most of it."
        )
        return rates.flops / median, None
    return rates.flops_per_s, boundary_mismatch(run, rates, ceilings)


def build_roofline(run: RunResult) -> Roofline | None:
    """The roofline of a valid run with rates, if its worker sent measured ceilings; its
    point only where the rate's boundary is the roofs'."""
    ceilings, rates = run.ceilings, run.rates
    if ceilings is None or rates is None or not run.valid:
        return None
    # Roofs of 0 or below (a run stored before registration bounded them) draw nothing.
    if not ceilings.copy_bytes_per_s or ceilings.copy_bytes_per_s <= 0:
        return None
    if not rates.flops_per_s or rates.flops_per_s <= 0 or rates.bytes <= 0:
        return None
    wanted, mixed = roof_dtype(run)
    dtype = wanted if wanted in ceilings.matmul_flops_per_s else "float32"
    peak = ceilings.matmul_flops_per_s.get(dtype)
    if not peak or peak <= 0:
        return None
    notes = list(mixed)
    if dtype != wanted:
        notes.append(f"No {wanted} matmul was measured on this worker; the roof is float32's.")
    if ceilings.device_kind != run.environment.device_kind:
        notes.append(
            f"The ceilings were measured on {ceilings.device_kind}, the run ran on "
            f"{run.environment.device_kind}."
        )
    achieved, withheld = _point(run, rates, ceilings, notes)
    return Roofline(
        bandwidth=ceilings.copy_bytes_per_s,
        peak=peak,
        dtype=dtype,
        intensity=rates.flops / rates.bytes,
        achieved=None if withheld else achieved,
        label=measured_label(ceilings),
        notes=tuple(notes),
        counts=counts_of(rates),
        withheld=withheld,
    )


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@dataclass(frozen=True)
class _Scale:
    """The chart's decades on each axis and where a value lands, `width` wide."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    width: int

    @staticmethod
    def of(r: Roofline, width: int) -> _Scale:
        x_lo = 10 ** math.floor(math.log10(min(r.intensity, r.ridge)) - 1)
        x_hi = 10 ** math.ceil(math.log10(max(r.intensity, r.ridge)) + 1)
        top = max(r.peak, r.achieved or 0.0)
        y_lo = 10 ** math.floor(math.log10(min(r.achieved or math.inf, r.bandwidth * x_lo)))
        return _Scale(x_lo, x_hi, y_lo, 10 ** math.ceil(math.log10(top * 1.5)), width)

    def x(self, v: float) -> float:
        plot_w = self.width - PAD_L - PAD_R
        return PAD_L + plot_w * math.log10(v / self.x_lo) / math.log10(self.x_hi / self.x_lo)

    def y(self, v: float) -> float:
        plot_h = H - PAD_T - PAD_B
        return PAD_T + plot_h * (1 - math.log10(v / self.y_lo) / math.log10(self.y_hi / self.y_lo))


def _decades(lo: float, hi: float) -> range:
    return range(round(math.log10(lo)), round(math.log10(hi)) + 1)


def _grid(s: _Scale) -> list[El]:
    """A grid line and label at every decade of both axes."""
    parts: list[El] = []
    for exp in _decades(s.x_lo, s.x_hi):
        gx = s.x(10.0**exp)
        parts.append(el("line", class_="grid", x1=gx, x2=gx, y1=PAD_T, y2=H - PAD_B))
        label = f"{10.0**exp:g}"
        parts.append(el("text", label, class_="axis", x=gx, y=H - PAD_B + 16, text_anchor="middle"))
    for exp in _decades(s.y_lo, s.y_hi):
        gy = s.y(10.0**exp)
        parts.append(el("line", class_="grid", x1=PAD_L, x2=s.width - PAD_R, y1=gy, y2=gy))
        label = _si(10.0**exp, "FLOP/s")
        parts.append(el("text", label, class_="axis", x=PAD_L - 6, y=gy + 4, text_anchor="end"))
    return parts


def _roofs(r: Roofline, s: _Scale, narrow: bool) -> list[El]:
    """The two roofs as one line, each labelled with what it is (and, wide, its figure)."""
    x, y = s.x, s.y
    mid = math.sqrt(s.x_lo * r.ridge)  # where the memory roof's label sits, above the line
    points = (
        f"{x(s.x_lo):.1f},{y(r.bandwidth * s.x_lo):.1f} "
        f"{x(r.ridge):.1f},{y(r.peak):.1f} {x(s.x_hi):.1f},{y(r.peak):.1f}"
    )
    compute = f"{r.dtype} matmul" if narrow else f"{r.dtype} matmul {_si(r.peak, 'FLOP/s')}"
    copy = "copy" if narrow else f"copy {_si(r.bandwidth, 'B/s')}"
    return [
        el("polyline", class_="roof", points=points),
        el(
            "text",
            compute,
            class_="roof-label",
            x=x(s.x_hi) - 4,
            y=y(r.peak) - 6,
            text_anchor="end",
        ),
        el(
            "text",
            copy,
            class_="roof-label",
            x=x(mid) - 6,
            y=y(r.bandwidth * mid) - 6,
            text_anchor="end",
        ),
    ]


def roofline_svg(r: Roofline, title_id: str = "roofline", width: int = W) -> Chart:
    """The roofline as a chart, log-log, labelled with where its roofs came from, `width`
    wide (a narrow one says less in its captions, at the same text size); the run's point
    only when its rate shares the roofs' boundary."""
    narrow = width < W
    s = _Scale.of(r, width)
    title = (
        f"Roofline {r.label}: memory roof {_si(r.bandwidth, 'B/s')}, compute roof "
        f"{_si(r.peak, 'FLOP/s')} ({r.dtype}); "
        + (
            f"this run {_si(r.achieved, 'FLOP/s')} at {r.intensity:.3g} FLOP/byte"
            if r.achieved is not None
            else "no point for this run, whose rate was timed on another boundary"
        )
    )
    caption = "Roofs measured on this worker" if narrow else f"Roofs {r.label}; not datasheet peaks"
    parts = [el("text", caption, class_="caption", x=PAD_L, y=18), *_grid(s), *_roofs(r, s, narrow)]
    if r.achieved is not None:
        parts.append(
            el(
                "circle",
                title=f"this run: {_si(r.achieved, 'FLOP/s')} at {r.intensity:.3g} FLOP/byte",
                class_="point",
                cx=s.x(r.intensity),
                cy=s.y(r.achieved),
                r=5,
            )
        )
    counted = "analytic" if r.counts == COUNTS[ANALYTIC] else "compiler-counted"
    x_label = (
        "FLOP per byte (log)"
        if narrow
        else f"arithmetic intensity ({counted} FLOPs per byte, log scale)"
    )
    parts.append(
        el(
            "text",
            x_label,
            class_="axis",
            x=(PAD_L + width - PAD_R) / 2,
            y=H - 8,
            text_anchor="middle",
        )
    )
    data = {"bandwidth": repr(r.bandwidth), "peak": repr(r.peak)}
    return Chart("roofline", width, H, title_id, title, parts, data)


def roofline_view(run: RunResult) -> dict[str, Any] | None:
    """What the run page shows: the chart, the figures behind it and any caveats."""
    r = build_roofline(run)
    if r is None:
        return None
    placed = r.achieved is not None
    # A point above a measured roof says the roof is wrong, not that the run beat it.
    ratio = r.achieved / r.attainable if r.achieved is not None else None
    return {
        "chart": roofline_svg(r),
        "narrow_chart": roofline_svg(r, "roofline-narrow", NARROW_W),
        "label": r.label,
        "dtype": r.dtype,
        "bandwidth": _si(r.bandwidth, "B/s"),
        "peak": _si(r.peak, "FLOP/s"),
        "achieved": _si(r.achieved, "FLOP/s") if r.achieved is not None else None,
        "intensity": f"{r.intensity:.3g}",
        "ridge": f"{r.ridge:.3g}",
        "counts": r.counts,
        "bound": r.bound if placed else None,
        "withheld": r.withheld,
        "fraction": f"{ratio:.0%}" if ratio is not None and not r.above_roof else None,
        "above_roof": (
            f"This run lies {ratio:.2g}× above the roof there, which a "
            "measured ceiling should make impossible: the ceiling was under-measured "
            "(a busy worker, or a copy or matmul slower than this workload's kernels), so no "
            "fraction of it is given."
            if ratio is not None and r.above_roof
            else None
        ),
        "method": run.ceilings.method if run.ceilings is not None else "",
        "notes": list(r.notes),
    }
