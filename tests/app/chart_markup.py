"""A chart's markup outside a page, for the tests: the page's own `_chart.html` macro."""

from __future__ import annotations

from markupsafe import Markup

from app.pages.charts import Chart
from app.web.templating import make_environment


def render_chart(chart: Chart | None) -> Markup:
    """What a page draws for `chart` (nothing for None)."""
    if chart is None:
        return Markup("")
    macro = make_environment().get_template("_chart.html").module.chart  # type: ignore[attr-defined]
    rendered: Markup = macro(chart)
    return rendered
