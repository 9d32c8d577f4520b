"""Every page, on a phone (390x844) and a desktop (1280x800), looked at as a person would:
no sideways scrolling, no console errors or failed requests, no serious or critical
accessibility faults (axe-core), and no text in the pictures smaller than 12 px.

One server (with a run in every state, a comparison and a matrix) and one page per window
size serve the whole module; screenshots go to test-results/browser/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import checks
from tests.browser.conftest import serve
from tests.browser.seed import WORKER_TOKEN, Site, seed

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    env = {"BOUNDARY_WORKER_TOKEN": WORKER_TOKEN}
    for url in serve(tmp_path_factory.mktemp("every-page"), workers=1, env=env):
        seeded = seed(url)
        try:
            yield seeded
        finally:
            if seeded.played is not None:
                seeded.played.stop()


@pytest.fixture(scope="module")
def tabs(browser: Browser) -> Iterator[dict[str, tuple[Page, checks.Watch]]]:
    """One page per window size, reused by every visit."""
    opened = {}
    for name, size in checks.VIEWPORTS.items():
        context = browser.new_context(viewport=size)  # type: ignore[arg-type]
        page = context.new_page()
        watch = checks.Watch()
        watch.attach(page)
        opened[name] = (page, watch)
    yield opened
    for page, _ in opened.values():
        page.context.close()


PAGES: dict[str, Callable[[Site], str]] = {
    "reader": lambda s: "/",
    "read-cuda-scale": lambda s: "/read/cuda/scale",
    "read-tpu-execute": lambda s: "/read/jax-tpu/execute",
    "embed": lambda s: "/embed/jax-gpu/compile",
    "guide": lambda s: "/guide",
    "runs": lambda s: "/runs",
    "run-new": lambda s: "/runs/new",
    "workers": lambda s: "/workers",
    "run-done": lambda s: f"/runs/{s.runs['done']}",
    "run-compile-only": lambda s: f"/runs/{s.runs['compile-only']}",
    "run-queued": lambda s: f"/runs/{s.runs['queued']}",
    "run-running": lambda s: f"/runs/{s.runs['running']}",
    "run-failed": lambda s: f"/runs/{s.runs['failed']}",
    "run-ir": lambda s: f"/runs/{s.runs['done']}/ir/stablehlo",
    "run-b200": lambda s: f"/runs/{s.runs['b200']}",
    "run-v6e": lambda s: f"/runs/{s.runs['v6e']}",
    "run-b200-ptx": lambda s: f"/runs/{s.runs['b200']}/ir/ptx",
    "run-pipeline": lambda s: f"/runs/{s.runs['pipeline']}/pipeline",
    "compare": lambda s: s.compare,
    "compare-picker": lambda s: f"/compare?a={s.runs['done']}",
    "compare-targets": lambda s: s.compare_targets,
    "compare-pipelines": lambda s: (
        f"/compare/pipelines?a={s.runs['pipeline']}&b={s.runs['pipeline']}"
    ),
    "artifacts-new": lambda s: "/artifacts/new",
    "matrices": lambda s: "/matrices",
    "matrix-new": lambda s: "/matrices/new",
    "matrix": lambda s: f"/matrices/{s.matrix}",
    "not-found": lambda s: "/runs/no-such-run",
}
DELIBERATE = {"not-found": 404}
"""Pages whose own document answers an error on purpose, by name."""

PICTURED = {"reader", "read-cuda-scale", "read-tpu-execute", "embed", "run-done", "compare"}
"""Pages that must hold a picture (so the font check is not vacuous there)."""


@pytest.mark.parametrize("name", list(PAGES))
@pytest.mark.parametrize("viewport", list(checks.VIEWPORTS))
def test_the_page_reads_well(
    viewport: str, name: str, site: Site, tabs: dict[str, tuple[Page, checks.Watch]]
) -> None:
    page, watch = tabs[viewport]
    watch.clear()
    url = site.url + PAGES[name](site)
    response = page.goto(url, wait_until="load")
    assert response is not None
    assert response.status == DELIBERATE.get(name, 200), url
    page.wait_for_timeout(300)  # htmx's load-time requests (IR view, live stream) settle
    checks.shot(page, f"{name}-{viewport}")
    problems: list[str] = []
    sideways = checks.overflow(page)
    if sideways["scroll"] > sideways["width"]:
        problems.append(f"scrolls sideways: {sideways}")
    tiny = checks.small_text(page)
    if tiny:
        problems.append(f"text under {checks.MIN_FONT_PX} px in pictures: {tiny[:6]}")
    if name in PICTURED and checks.picture_text_count(page) == 0:
        problems.append("no picture text found")
    buttons = checks.button_styles(page)
    if len(buttons) > 1:
        problems.append(f"buttons in {len(buttons)} styles: {buttons}")
    problems += [f"axe: {line}" for line in checks.axe_faults(page)]
    # The browser logs a page's own error status; only that one is expected.
    expected = "Failed to load resource: the server responded with a status of 404"
    problems += [
        f"console: {line}"
        for line in watch.console
        if not (name in DELIBERATE and line.startswith(expected))
    ]
    document_error = f"GET {url}: {DELIBERATE.get(name)}"
    problems += [f"request: {line}" for line in watch.failed if line != document_error]
    assert not problems, "\n".join(problems)


def _active(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = page.evaluate(
        "() => ({id: document.activeElement.id, tag: document.activeElement.tagName,"
        " text: document.activeElement.textContent.trim().slice(0, 60)})"
    )
    return found


def test_focus_follows_a_reader_swap(
    site: Site, tabs: dict[str, tuple[Page, checks.Watch]]
) -> None:
    page, _ = tabs["desktop"]
    page.goto(site.url + "/read/jax-gpu/compile")
    live = page.locator("#reader-status")
    page.locator('a[data-path="jax-tpu"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator("#reader")).to_have_attribute("data-path", "jax-tpu")
    expect(page.locator("#card-title")).to_be_focused()
    expect(live).to_contain_text("TPU")
    # The next Tab goes on into the card, not back to the top of the document.
    page.keyboard.press("Tab")
    assert _active(page)["tag"] != "BODY"
    assert page.evaluate("document.querySelector('#reader').contains(document.activeElement)")
    # A stage, by keyboard alone, the same way.
    page.locator('a[data-stage="scale"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator("#reader")).to_have_attribute("data-stage", "scale")
    expect(page.locator("#card-title")).to_be_focused()
    expect(live).to_contain_text("Scale")


def test_run_ids_keep_their_case(site: Site, tabs: dict[str, tuple[Page, checks.Watch]]) -> None:
    page, _ = tabs["desktop"]
    job_id = site.runs["done"]
    page.goto(f"{site.url}/runs/{job_id}")
    shown = page.locator(".eyebrow .run-id")
    expect(shown).to_have_text(job_id)
    # What the eye reads (and copies) is the id itself, not an uppercased one that 404s.
    assert (
        page.evaluate("getComputedStyle(document.querySelector('.eyebrow .run-id')).textTransform")
        == "none"
    )
    assert shown.evaluate("e => e.innerText") == job_id
