"""The geometry of a path's pipeline picture, with each stage's boundary bracketed.

Two layouts of the same picture: `wide` (boxes in a row, brackets above) for a container
at least `WIDTH` pixels wide, and `tall` (boxes in a column, brackets beside) for phones
and narrow embeds. Both are drawn at no less than their own size, so their text never
renders below the 12 px it is set in; CSS shows the one that fits (a container query).
`templates/_diagram.html` draws them, autoescaped. The SVGs carry the selected stage in
`data-stage`; CSS does the highlighting, so the picture is right with JavaScript off and
the autoplay only has to change one attribute.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from app.reader.content import READER_STAGES
from app.reader.models import PathInfo

WIDTH = 960
"""The wide layout's width: shown only where the container is at least this wide."""
TALL_WIDTH = 320
"""The tall layout's width: fits a 390 px phone with the page's margins."""
PAD = 12
GAP = 22
BOX_H = 74
LANE_H = 26
FONT_PX = 13
LABEL_PX = 12
CHAR_PX = 7.0  # average advance of the UI font at FONT_PX, for wrapping labels
LABEL_CHAR_PX = 6.5  # the same at LABEL_PX
LEGEND = (
    "Brackets mark what each stage times or hands over; the highlighted one is the "
    "boundary to inspect."
)


@dataclass
class Line:
    x: float
    y: float
    text: str


@dataclass
class Box:
    stage: str
    label: str
    detail: str
    x: float
    y: float
    w: float
    h: float
    lines: list[Line]


@dataclass
class Bracket:
    stage: str
    d: str
    anchor: str
    lines: list[Line]


@dataclass
class Layout:
    """One drawing of the pipeline: its size, boxes, arrows between them, and brackets."""

    name: str
    width: float
    height: float
    boxes: list[Box] = field(default_factory=list)
    arrows: list[tuple[float, float, float, float]] = field(default_factory=list)
    brackets: list[Bracket] = field(default_factory=list)
    legend: list[Line] = field(default_factory=list)


def _wrap(text: str, width_px: float, char_px: float, most: int = 3) -> list[str]:
    chars = max(6, int(width_px / char_px))
    return (textwrap.wrap(text, chars, break_long_words=False) or [text])[:most]


def _bracket_text(path: PathInfo, stage: str) -> str:
    b = next(b for b in path.boundaries if b.stage == stage)
    return f"{stage} · {b.label}"


def wide_layout(path: PathInfo) -> Layout:
    """Boxes in a row, one lane of brackets per stage above them."""
    steps = path.steps
    n = len(steps)
    box_w = (WIDTH - 2 * PAD - (n - 1) * GAP) / n
    top = PAD + len(READER_STAGES) * LANE_H + 6
    index = {s.id: i for i, s in enumerate(steps)}
    legend_y = top + BOX_H + PAD + 14
    out = Layout("wide", WIDTH, legend_y + PAD)

    def x_of(i: int) -> float:
        return PAD + i * (box_w + GAP)

    for lane, stage in enumerate(READER_STAGES):
        for b in (b for b in path.boundaries if b.stage == stage):
            x0, x1 = x_of(index[b.first]), x_of(index[b.last]) + box_w
            y = PAD + lane * LANE_H + 16
            text = _bracket_text(path, stage.value)
            # Keep the label inside the picture even when it is wider than its bracket.
            half = len(text) * LABEL_CHAR_PX / 2
            cx = min(max((x0 + x1) / 2, PAD + half), WIDTH - PAD - half)
            out.brackets.append(
                Bracket(
                    stage.value,
                    f"M{x0:.1f} {y + 8}V{y}H{x1:.1f}V{y + 8}",
                    "middle",
                    [Line(round(cx, 1), y - 4, text)],
                )
            )
    for i, step in enumerate(steps):
        x = x_of(i)
        lines = _wrap(step.label, box_w - 10, CHAR_PX)
        first_y = top + BOX_H / 2 - (len(lines) - 1) * (FONT_PX + 3) / 2 + FONT_PX / 3
        out.boxes.append(
            Box(
                step.stage.value,
                step.label,
                step.detail,
                round(x, 1),
                top,
                round(box_w, 1),
                BOX_H,
                [
                    Line(round(x + box_w / 2, 1), round(first_y + j * (FONT_PX + 3), 1), t)
                    for j, t in enumerate(lines)
                ],
            )
        )
        if i < n - 1:
            ay = top + BOX_H / 2
            out.arrows.append((round(x + box_w + 2, 1), ay, round(x + box_w + GAP - 3, 1), ay))
    out.legend = [Line(PAD, legend_y, LEGEND)]
    return out


def tall_layout(path: PathInfo) -> Layout:
    """Boxes in a column, one lane of brackets per stage beside them, labels below."""
    steps = path.steps
    lane_w = 14
    x0 = PAD + len(READER_STAGES) * lane_w + 4
    box_w = TALL_WIDTH - PAD - x0
    box_h, gap = 40, 16
    index = {s.id: i for i, s in enumerate(steps)}
    out = Layout("tall", TALL_WIDTH, 0)

    def y_of(i: int) -> float:
        return PAD + i * (box_h + gap)

    for i, step in enumerate(steps):
        y = y_of(i)
        lines = _wrap(step.label, box_w - 12, CHAR_PX, most=2)
        first_y = y + box_h / 2 - (len(lines) - 1) * (FONT_PX + 3) / 2 + FONT_PX / 3
        out.boxes.append(
            Box(
                step.stage.value,
                step.label,
                step.detail,
                x0,
                y,
                box_w,
                box_h,
                [
                    Line(x0 + box_w / 2, round(first_y + j * (FONT_PX + 3), 1), t)
                    for j, t in enumerate(lines)
                ],
            )
        )
        if i < len(steps) - 1:
            ax = x0 + box_w / 2
            out.arrows.append((ax, y + box_h + 2, ax, y + box_h + gap - 3))
    y = y_of(len(steps)) + 6
    for lane, stage in enumerate(READER_STAGES):
        # The first stage's lane is nearest the boxes and its label comes first, so no
        # line running down to a label crosses another.
        lx = PAD + 4 + (len(READER_STAGES) - 1 - lane) * lane_w
        for b in (b for b in path.boundaries if b.stage == stage):
            y0, y1 = y_of(index[b.first]) + 2, y_of(index[b.last]) + box_h - 2
            lines = _wrap(_bracket_text(path, stage.value), box_w, LABEL_CHAR_PX)
            label_top = y + LABEL_PX
            tick = label_top - LABEL_PX / 3
            d = f"M{lx + 6} {y0}H{lx}V{tick}H{x0 - 6}M{lx} {y1}H{lx + 6}"
            out.brackets.append(
                Bracket(
                    stage.value,
                    d,
                    "start",
                    [Line(x0, label_top + j * (LABEL_PX + 4), t) for j, t in enumerate(lines)],
                )
            )
            y = label_top + (len(lines) - 1) * (LABEL_PX + 4) + 12
    legend = _wrap(LEGEND, TALL_WIDTH - 2 * PAD, LABEL_CHAR_PX, most=4)
    out.legend = [Line(PAD, y + 8 + j * (LABEL_PX + 4), t) for j, t in enumerate(legend)]
    out.height = y + 8 + (len(legend) - 1) * (LABEL_PX + 4) + PAD
    return out


def pipeline(path: PathInfo, selected: str, *, title_id: str) -> dict[str, object]:
    """What `_diagram.html` needs to draw `path` with stage `selected` highlighted."""
    return {
        "selected": selected,
        "title_id": title_id,
        "title": path.label + ": " + " → ".join(s.label for s in path.steps),
        "layouts": [wide_layout(path), tall_layout(path)],
    }
