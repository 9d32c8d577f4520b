"""Charts as data: the shapes of an SVG picture, drawn by `templates/_chart.html`.

Chart modules (samples, distributions, roofline, sweep, scaling) compute geometry and
return a `Chart`; the template writes the markup with autoescaping on, so no label (a run
id, a worker name, a workload's parameter) can ever become markup. Tag and attribute
names are the modules' own constants; every value and text is escaped.

Charts are drawn at their own size (`width` × `height` CSS pixels), never scaled down:
their 12-13 px text stays readable and a narrow screen scrolls the chart's own box. A
`fluid` chart instead takes its box's width (up to `width`) with no viewBox of its own: its
elements place themselves in percent of that width (or in a nested <svg> that stretches),
so its text keeps its size while the picture fits the box.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

Number = int | float


def fmt(value: Number) -> str:
    """A coordinate as SVG wants it: one decimal, no trailing noise."""
    return f"{value:.1f}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class El:
    """One SVG element: its tag, attributes, text, tooltip and children."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    text: str = ""
    title: str = ""
    children: tuple[El, ...] = ()


def el(
    tag: str, text: str = "", title: str = "", children: tuple[El, ...] = (), **attrs: Any
) -> El:
    """An element; attribute names use `_` for `-` and a trailing `_` for Python keywords
    (`class_`); numbers are formatted with `fmt`."""
    out = {}
    for key, value in attrs.items():
        name = key.rstrip("_").replace("_", "-")
        out[name] = fmt(value) if isinstance(value, int | float) else str(value)
    return El(tag, out, text, title, children)


@dataclass(frozen=True)
class Chart:
    """A whole picture: its class, size, accessible title and elements."""

    cls: str
    width: int
    height: int
    title_id: str
    title: str
    elements: list[El]
    data: dict[str, str] = field(default_factory=dict)
    """`data-*` attributes on the <svg>, for tests and scripts."""
    fluid: bool = False
    """As wide as its box (at most `width`), its text unscaled: see the module's note."""


def render_chart(chart: Chart | None) -> Markup:
    """The chart's markup outside a page (the JSON twin, tests): the same template."""
    if chart is None:
        return Markup("")
    from app.web.templating import make_environment

    macro = make_environment().get_template("_chart.html").module.chart  # type: ignore[attr-defined]
    rendered: Markup = macro(chart)
    return rendered
