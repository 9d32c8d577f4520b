"""Does it fit? A target run's memory per device against what the device may hold.

The figures are the compiler's own (XLA's `memory_analysis()` of the per-device program):
arguments, outputs, temporaries and generated code. What a device needs is XLA's peak
(arguments, outputs and temporaries live at once, less what aliases) plus the code. It
is set against the device's usable bytes (on a TPU what libtpu makes available to a
program, read from libtpu; on a GPU JAX's default share of the HBM), with the vendor's
published HBM beside it in the vendor's label and in bytes (GB = 10^9 bytes, GiB = 2^30
bytes). A run made before usable bytes were reported is set against the published HBM,
and says so.
"""

from __future__ import annotations

from typing import Any

from app.pages.charts import Chart, El, el
from workers.protocol import CHIPS, Platform, TargetModel, fit_limit
from workers.protocol.sizes import byte_text as gb

GIB = 2**30
BAR_W, BAR_H = 640, 28
BAR_Y = 22
"""Room above the bars for the HBM line's label."""
PAD = 4
"""Room right of the bars, so the HBM line's stroke is not clipped at full scale."""

PARTS: tuple[tuple[str, str], ...] = (
    ("argument_bytes", "arguments"),
    ("output_bytes", "outputs"),
    ("temp_bytes", "temporaries"),
    ("generated_code_bytes", "generated code"),
)


GPU_CODE_UNREPORTED = (
    "XLA:GPU's compile without the device does not report the size of its generated code "
    "(its memory_analysis() leaves the field at 0)"
)


TPU_TEMP_UNREPORTED = (
    "libtpu's compile without the device does not report the temporaries (its "
    "memory_analysis() leaves them at 0 beside a filled-in peak); the peak includes them"
)


def compiler_of(model: str) -> str:
    """The compiler that compiles for a target's chip model: libtpu or XLA:GPU."""
    names = {Platform.TPU: "libtpu", Platform.GPU: "XLA:GPU"}
    platform = _platform(model)
    return names.get(platform, "the compiler") if platform is not None else "the compiler"


def _platform(model: str) -> Platform | None:
    """The platform of a target's chip model ("h100"), or None for no known model."""
    try:
        return CHIPS[TargetModel(model)].platform
    except (ValueError, KeyError):
        return None


def _with_code_known(memory: dict[str, Any], model: str) -> dict[str, Any]:
    """`memory` with a GPU target's generated code as unknown: XLA:GPU compiling without
    the device never fills that figure in, so the 0 of runs made before the worker said
    so is no size either."""
    if _platform(model) is Platform.GPU and not memory.get("generated_code_bytes"):
        return {**memory, "generated_code_bytes": None}
    return memory


def needed_bytes(memory: dict[str, Any]) -> int | None:
    """What one device needs: XLA's peak plus the generated code (None when unknown)."""
    peak = memory.get("peak_bytes")
    if peak is None:
        parts = [memory.get(k) for k, _ in PARTS[:3]]
        if any(p is None for p in parts):
            return None
        peak = sum(int(p) for p in parts if p is not None)
    return int(peak) + int(memory.get("generated_code_bytes") or 0)


def memory_fit(
    memory: dict[str, Any] | None,
    model: str,
    count: int,
    chart_id: str = "memory-bars",
    *,
    refused: str | None = None,
) -> dict[str, Any] | None:
    """The fit's figures, verdict and bar chart, or None without memory figures. `chart_id`
    names the chart's title: give each fit on one page its own. `refused` is the
    compiler's refusal of a program too big for the chip (libtpu's): its figure is then
    a lower bound of what a device needs."""
    if not memory:
        return None
    memory = _with_code_known(memory, model)
    if _platform(model) is Platform.TPU and not refused:  # libtpu's 0 is no size
        memory = {**memory, "temp_bytes": None}
    hbm = int(memory["hbm_bytes"])
    limit, usable = fit_limit(memory)
    needed = needed_bytes(memory)
    missing = f"not reported by {compiler_of(model)} without the device"
    rows = [_row(label, memory.get(key), limit, missing) for key, label in PARTS]
    peak = memory.get("peak_bytes")
    code_note = None
    if memory.get("generated_code_bytes") is None and not refused:
        gpu = _platform(model) is Platform.GPU
        why = GPU_CODE_UNREPORTED if gpu else "the compiler reported no size of its code"
        code_note = f"{why}, so needed leaves it out"
    temp_note = None
    if memory.get("temp_bytes") is None and _platform(model) is Platform.TPU and not refused:
        temp_note = TPU_TEMP_UNREPORTED
    word = "usable" if usable else "of HBM"
    return {
        "rows": rows,
        "needed_bytes": needed,
        "needed": gb(needed) if needed is not None else None,
        "peak_bytes": peak,
        "peak": _row("peak (XLA)", peak, limit) if peak is not None and not refused else None,
        "code_note": code_note,
        "temp_note": temp_note,
        "usable_bytes": limit if usable else None,
        "usable": gb(limit) if usable else None,
        "usable_gib": f"{limit / GIB:.4g} GiB" if usable else None,
        "usable_source": memory.get("usable_source") if usable else None,
        "share_of": word,
        "hbm_bytes": hbm,
        "hbm": gb(hbm),
        "hbm_gib": f"{hbm / GIB:.4g} GiB",
        "hbm_label": memory.get("hbm_label"),
        "source": memory.get("source"),
        **_verdict(needed, limit, word, refused),
        "refused": refused,
        "over_bytes": (needed - limit) if needed is not None and needed > limit else 0,
        "chart": _bars(memory, limit, word, needed, model, count=count, chart_id=chart_id),
        "scale": gb(max(limit, needed or 0)),
    }


def _verdict(needed: int | None, limit: int, word: str, refused: str | None) -> dict[str, Any]:
    """Whether `needed` fits `limit` (None when unknown), and the sentence that says so."""
    if needed is None:
        return {"fits": None, "verdict": "Unknown: the compiler reported no peak"}
    has = f"{gb(limit)} usable" if word == "usable" else gb(limit)
    if refused and needed <= limit:  # the refusal's figure is rounded; its verdict is not
        verdict = (
            f"Does not fit: the compiler refused the program (its figure, {gb(needed)}, "
            f"is rounded; it has {has})"
        )
        return {"fits": False, "verdict": verdict}
    if needed <= limit:
        verdict = f"Fits: {gb(needed)} of {has} ({100 * needed / limit:.3g} %)"
    elif refused:
        verdict = (
            f"Does not fit by at least {gb(needed - limit)}: needs at least {gb(needed)}, has "
            f"{has}; the compiler refused the program"
        )
    else:
        verdict = f"Does not fit by {gb(needed - limit)}: needs {gb(needed)}, has {has}"
    return {"fits": needed <= limit, "verdict": verdict}


def _row(
    label: str, value: int | None, limit: int, missing: str = "not reported"
) -> dict[str, Any]:
    """One row of the memory table: a size in decimal units, its bytes, its share of what
    the device may hold (`missing` in place of a figure the compiler did not report)."""
    return {
        "label": label,
        "bytes": value,
        "gb": gb(value) if value is not None else missing,
        "share": f"{100 * value / limit:.3g} %" if value is not None else "—",
    }


def _parts(memory: dict[str, Any], scale_to: int) -> list[El]:
    """The program's parts, side by side along one bar, each its share of `scale_to`."""
    x = 0.0
    parts: list[El] = []
    for i, (key, label) in enumerate(PARTS):
        value = memory.get(key)
        if not value:
            continue
        width = BAR_W * int(value) / scale_to
        parts.append(
            el(
                "rect",
                title=f"{label}: {gb(int(value))}",
                class_=f"mem-part mem-{i}",
                x=f"{x:.2f}",
                y=BAR_Y,
                width=f"{max(width, 0.5):.2f}",
                height=BAR_H,
            )
        )
        x += width
    return parts


def _bars(
    memory: dict[str, Any],
    hbm: int,
    word: str,
    needed: int | None,
    model: str,
    *,
    count: int,
    chart_id: str,
) -> Chart:
    """One stacked bar per device: the program's parts, and what it may hold (`hbm`: the
    usable bytes, or the HBM where those are not reported) as a line."""
    scale_to = max(hbm, needed or 0) or 1
    parts = _parts(memory, scale_to)
    line = BAR_W * hbm / scale_to
    over = needed is not None and needed > hbm
    title = (
        f"Memory per device for {count} × {model}: "
        f"{gb(needed) if needed is not None else 'unknown'} needed against {gb(hbm)} "
        f"{word}"
    )
    hbm_rect = el(
        "rect",
        class_="mem-hbm",
        x=0,
        y=BAR_Y,
        width=f"{line:.2f}",
        height=BAR_H,
        vector_effect="non-scaling-stroke",
    )
    limit = el(
        "line",
        class_="mem-limit",
        x1=f"{line:.2f}",
        x2=f"{line:.2f}",
        y1=BAR_Y - 6,
        y2=BAR_Y + BAR_H + 6,
        vector_effect="non-scaling-stroke",
    )
    height = BAR_Y + BAR_H + 8
    # The bars stretch to the box's width (a nested picture without a fixed aspect), while
    # the line's label stays at its own size: it is placed in percent of the width, at the
    # line, on the side with room.
    bars = el(
        "svg",
        children=(hbm_rect, *parts, limit),
        viewBox=f"0 0 {BAR_W + PAD} {height}",
        preserveAspectRatio="none",
        width="100%",
        height=height,
    )
    anchor = "end" if line > BAR_W / 2 else "start"
    hbm_label = el(
        "text",
        f"{'usable' if word == 'usable' else 'HBM'} {gb(hbm)}",
        class_="axis mem-label",
        x=f"{100 * line / (BAR_W + PAD):.2f}%",
        dx=-4 if anchor == "end" else 4,
        y=BAR_Y - 8,
        text_anchor=anchor,
    )
    cls = "memory-bars over" if over else "memory-bars"
    return Chart(cls, BAR_W + PAD, height, chart_id, title, [bars, hbm_label], fluid=True)
