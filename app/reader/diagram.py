"""Server-rendered SVG of a path's pipeline, with each stage's boundary bracketed.

The SVG carries the selected stage in `data-stage`; CSS does the highlighting, so the
picture is right with JavaScript off and the autoplay only has to change one attribute.
"""

from __future__ import annotations

import textwrap
from html import escape

from app.reader.content import READER_STAGES, PathInfo

WIDTH = 960
PAD = 12
GAP = 22
BOX_H = 70
LANE_H = 24
FONT_PX = 12
CHAR_PX = 6.6  # average advance of the UI font at FONT_PX, for wrapping labels
LABEL_CHAR_PX = 6.2  # the same for the 11 px bracket labels


def _wrap(label: str, width_px: float) -> list[str]:
    chars = max(6, int((width_px - 12) / CHAR_PX))
    lines = textwrap.wrap(label, chars, break_long_words=False) or [label]
    return lines[:3]


def render_pipeline(path: PathInfo, selected: str, *, title_id: str) -> str:
    """The pipeline of `path` as an inline SVG string, highlighting stage `selected`."""
    steps = path.steps
    n = len(steps)
    box_w = (WIDTH - 2 * PAD - (n - 1) * GAP) / n
    lanes = len(READER_STAGES)
    top = PAD + lanes * LANE_H + 6
    height = top + BOX_H + PAD + 18
    index = {s.id: i for i, s in enumerate(steps)}

    def x_of(i: int) -> float:
        return PAD + i * (box_w + GAP)

    out: list[str] = [
        f'<svg class="diagram" data-stage="{escape(selected)}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-labelledby="{title_id}" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{title_id}">{escape(path.label)}: '
        + escape(" → ".join(s.label for s in steps))
        + "</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z"/></marker></defs>',
    ]
    for lane, stage in enumerate(READER_STAGES):
        for b in (b for b in path.boundaries if b.stage == stage):
            x0 = x_of(index[b.first])
            x1 = x_of(index[b.last]) + box_w
            y = PAD + lane * LANE_H + 14
            text = f"{stage.value} · {b.label}"
            # Keep the label inside the picture even when it is wider than its bracket.
            half = len(text) * LABEL_CHAR_PX / 2
            cx = min(max((x0 + x1) / 2, PAD + half), WIDTH - PAD - half)
            out.append(
                f'<g class="bracket s-{stage.value}" data-stage="{stage.value}">'
                f'<path d="M{x0:.1f} {y + 8}V{y}H{x1:.1f}V{y + 8}"/>'
                f'<text x="{cx:.1f}" y="{y - 4}" text-anchor="middle">{escape(text)}</text></g>'
            )
    for i, step in enumerate(steps):
        x = x_of(i)
        lines = _wrap(step.label, box_w)
        first_y = top + BOX_H / 2 - (len(lines) - 1) * (FONT_PX + 2) / 2 + FONT_PX / 3
        tspans = "".join(
            f'<tspan x="{x + box_w / 2:.1f}" y="{first_y + j * (FONT_PX + 2):.1f}">'
            f"{escape(line)}</tspan>"
            for j, line in enumerate(lines)
        )
        out.append(
            f'<g class="step s-{step.stage.value}" data-stage="{step.stage.value}">'
            f"<title>{escape(step.label)}: {escape(step.detail)}</title>"
            f'<rect x="{x:.1f}" y="{top}" width="{box_w:.1f}" height="{BOX_H}" rx="8"/>'
            f'<text text-anchor="middle">{tspans}</text></g>'
        )
        if i < n - 1:
            ay = top + BOX_H / 2
            out.append(
                f'<line class="flow" x1="{x + box_w + 2:.1f}" y1="{ay}" '
                f'x2="{x + box_w + GAP - 3:.1f}" y2="{ay}" marker-end="url(#arrow)"/>'
            )
    legend_y = top + BOX_H + PAD + 10
    out.append(
        f'<text class="legend" x="{PAD}" y="{legend_y}">Brackets mark what each stage'
        " times or hands over; the highlighted one is the boundary to inspect.</text>"
    )
    out.append("</svg>")
    return "".join(out)
