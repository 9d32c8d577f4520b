"""What a person would notice on a page, measured in the browser: sideways scrolling, text
too small to read in pictures, console errors, failed requests and accessibility faults."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import ConsoleMessage, Page, Request, Response

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "test-results" / "browser"
"""Screenshots land here (ignored by git); CI can keep the folder as an artifact."""

MIN_FONT_PX = 12.0
PICTURES = "svg.diagram, svg.samples, svg.scaling, svg.roofline, svg.sweep, svg.dists"

VIEWPORTS = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1280, "height": 800}}

# Rendered font size of every visible text in the pictures: its computed size times the
# scale at which its SVG is drawn (the screen matrix of the text element).
_FONT_SIZES = """(selector) => {
  const out = [];
  for (const svg of document.querySelectorAll(selector)) {
    if (!svg.getClientRects().length) continue;
    for (const t of svg.querySelectorAll('text')) {
      if (!t.getClientRects().length || !t.textContent.trim()) continue;
      const m = t.getScreenCTM();
      const scale = Math.hypot(m.a, m.b);
      const px = parseFloat(getComputedStyle(t).fontSize) * scale;
      out.push({svg: svg.getAttribute('class'), text: t.textContent.trim().slice(0, 40),
                px: Math.round(px * 10) / 10});
    }
  }
  return out;
}"""

# Elements wider than the window: the culprits when a page scrolls sideways.
_OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const culprits = [];
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.right > width + 1 && r.width > 0) {
      let inside = false;
      for (let p = el.parentElement; p; p = p.parentElement) {
        const s = getComputedStyle(p);
        if (/(auto|scroll|hidden)/.test(s.overflowX)) { inside = true; break; }
      }
      if (!inside) culprits.push(el.tagName.toLowerCase() + (el.className && typeof el.className
        === 'string' ? '.' + el.className.split(' ').join('.') : '') + ' ' + Math.round(r.right));
    }
  }
  return {scroll: document.documentElement.scrollWidth, width, culprits: culprits.slice(0, 8)};
}"""


@dataclass
class Watch:
    """Console errors and failed requests a page produced since the last `clear`."""

    console: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.console.append(f"pageerror: {exc}"))
        page.on("requestfailed", self._on_failed)
        page.on("response", self._on_response)

    def clear(self) -> None:
        self.console.clear()
        self.failed.clear()

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console.append(message.text)

    def _on_failed(self, request: Request) -> None:
        error = request.failure or ""
        # A live stream (server-sent events) or the icon is cut when the page is left
        # quickly: that is no fault of the page.
        if "ERR_ABORTED" in error and (request.url.endswith("/live") or "/favicon" in request.url):
            return
        self.failed.append(f"{request.method} {request.url}: {error}")

    def _on_response(self, response: Response) -> None:
        if response.status >= 400:
            self.failed.append(f"{response.request.method} {response.url}: {response.status}")


# How each visible button looks (colours, corners, font): one style for all of them.
_BUTTON_STYLES = """() => {
  const out = new Set();
  for (const b of document.querySelectorAll('button, a.primary, a.button')) {
    if (!b.getClientRects().length) continue;
    // A pressed toggle shows the same button's other state, not another style.
    if (b.getAttribute('aria-pressed') === 'true') continue;
    const s = getComputedStyle(b);
    out.add([s.backgroundColor, s.color, s.borderRadius, s.fontSize].join(' / '));
  }
  return [...out];
}"""


def button_styles(page: Page) -> list[str]:
    styles: list[str] = page.evaluate(_BUTTON_STYLES)
    return styles


def overflow(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = page.evaluate(_OVERFLOW)
    return found


def small_text(page: Page) -> list[dict[str, Any]]:
    sizes: list[dict[str, Any]] = page.evaluate(_FONT_SIZES, PICTURES)
    return [s for s in sizes if s["px"] < MIN_FONT_PX]


def picture_text_count(page: Page) -> int:
    return len(page.evaluate(_FONT_SIZES, PICTURES))


def axe_faults(page: Page) -> list[str]:
    """Serious and critical axe-core violations, one line each with where they are."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    lines = []
    for v in results.response["violations"]:
        if v["impact"] in ("serious", "critical"):
            targets = [" ".join(map(str, n["target"])) for n in v["nodes"][:4]]
            lines.append(f"{v['id']} ({v['impact']}, {len(v['nodes'])}): {targets}")
    return lines


def shot(page: Page, name: str) -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    target = OUTPUT / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".png")
    # The whole page where it is of a readable length; the first screen of a very long
    # one (the guide), which is slow to capture whole on a small machine.
    whole = page.evaluate("document.documentElement.scrollHeight") <= 6000
    page.screenshot(path=str(target), full_page=whole, timeout=60000)
    return target
