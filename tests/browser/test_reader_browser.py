"""The reader in a real browser: htmx swaps, history, keyboard, autoplay, embed height."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

pytestmark = pytest.mark.browser


def card_title(page: Page) -> str:
    return page.locator("#card-title").inner_text()


def test_clicking_swaps_the_card_and_pushes_the_url(page: Page, reader_server: str) -> None:
    page.goto(reader_server + "/read/jax-gpu/compile")
    page.evaluate("window.__marker = 'same document'")
    first = card_title(page)
    page.get_by_role("link", name="JAX → TPU v6e Trillium").click()
    expect(page).to_have_url(reader_server + "/read/jax-tpu/compile")
    expect(page.locator("#reader")).to_have_attribute("data-path", "jax-tpu")
    assert card_title(page) != first
    page.get_by_role("link", name="Execute").click()
    expect(page).to_have_url(reader_server + "/read/jax-tpu/execute")
    expect(page.locator("#reader")).to_have_attribute("data-stage", "execute")
    # Only the card was swapped: the document (and our marker) survived.
    assert page.evaluate("window.__marker") == "same document"
    expect(page.locator('a[aria-current="page"][data-stage="execute"]')).to_have_count(1)

    page.go_back()
    expect(page).to_have_url(reader_server + "/read/jax-tpu/compile")
    expect(page.locator("#reader")).to_have_attribute("data-stage", "compile")
    page.go_back()
    expect(page).to_have_url(reader_server + "/read/jax-gpu/compile")
    expect(page.locator("#card-title")).to_have_text(first)
    page.go_forward()
    expect(page).to_have_url(reader_server + "/read/jax-tpu/compile")


def test_keyboard_reaches_and_operates_the_selectors(page: Page, reader_server: str) -> None:
    page.goto(reader_server + "/read/jax-gpu/compile")
    for _ in range(40):
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement.textContent")
        if focused == "Direct CUDA C++ → B200":
            break
    else:
        pytest.fail("the CUDA path link is not reachable by Tab")
    page.keyboard.press("Enter")
    expect(page).to_have_url(reader_server + "/read/cuda/compile")
    expect(page.locator("#reader")).to_have_attribute("data-path", "cuda")
    # Focus is visible: the focused element has an outline.
    page.locator('a[data-stage="scale"]').focus()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"


def test_works_without_javascript(browser: Browser, reader_server: str) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(reader_server + "/")
        page.get_by_role("link", name="Scale").first.click()
        expect(page).to_have_url(reader_server + "/read/jax-gpu/scale")
        expect(page.locator("svg.diagram")).to_have_attribute("data-stage", "scale")
        page.go_back()
        expect(page).to_have_url(reader_server + "/")
    finally:
        context.close()


def test_autoplay_runs_on_load_and_stops_on_interaction(page: Page, reader_server: str) -> None:
    page.goto(reader_server + "/read/jax-tpu/compile")
    seq = page.locator("[data-sequence]")
    expect(seq).to_have_attribute("data-playing", "true")
    toggle = page.locator(".seq-toggle")
    expect(toggle).to_be_visible()
    expect(toggle).to_have_text("Pause")
    # The sequence steps on from the selected stage on its own.
    expect(page.locator("svg.diagram")).to_have_attribute("data-stage", "execute", timeout=5000)
    page.mouse.click(5, 5)
    expect(seq).to_have_attribute("data-playing", "false")
    # Stopped: the diagram is back on the selected stage and stays there.
    expect(page.locator("svg.diagram")).to_have_attribute("data-stage", "compile")
    page.wait_for_timeout(2000)
    expect(page.locator("svg.diagram")).to_have_attribute("data-stage", "compile")
    toggle.click()
    expect(seq).to_have_attribute("data-playing", "true")
    toggle.click()
    expect(seq).to_have_attribute("data-playing", "false")


def test_autoplay_never_highlights_a_stage_before_the_selected_one(
    page: Page, reader_server: str
) -> None:
    # On /read/cuda/scale it once lit up compile while Scale was the page's stage.
    page.goto(reader_server + "/read/cuda/scale")
    seen = set()
    for _ in range(25):
        seen.add(page.locator("svg.diagram").get_attribute("data-stage"))
        page.wait_for_timeout(100)
    assert seen == {"scale"}
    expect(page.locator(".seq-caption")).to_contain_text("Are we communicating between GPUs")


def test_autoplay_stops_on_a_key_press(page: Page, reader_server: str) -> None:
    page.goto(reader_server + "/")
    expect(page.locator("[data-sequence]")).to_have_attribute("data-playing", "true")
    page.keyboard.press("Tab")
    expect(page.locator("[data-sequence]")).to_have_attribute("data-playing", "false")


def test_no_autoplay_under_reduced_motion(browser: Browser, reader_server: str) -> None:
    context = browser.new_context(reduced_motion="reduce")
    page = context.new_page()
    try:
        page.goto(reader_server + "/read/cuda/execute")
        page.wait_for_timeout(2200)
        expect(page.locator("[data-sequence]")).to_have_attribute("data-playing", "false")
        expect(page.locator("svg.diagram")).to_have_attribute("data-stage", "execute")
        expect(page.locator(".seq-toggle")).to_have_text("Play")
    finally:
        context.close()


def test_embed_posts_its_height_to_the_parent(page: Page, reader_server: str) -> None:
    page.goto(reader_server + "/static/app.css")  # any same-origin document will do
    page.evaluate(
        """(src) => {
            window.__messages = [];
            window.addEventListener('message', (e) => window.__messages.push(e.data));
            document.body.innerHTML = '';
            const f = document.createElement('iframe');
            f.src = src; f.width = 600; f.height = 200;
            document.body.appendChild(f);
        }""",
        reader_server + "/embed/jax-gpu/execute",
    )
    # Poll from Python: the page's CSP forbids the eval that wait_for_function would use.
    for _ in range(100):
        if page.evaluate("() => window.__messages.length") > 0:
            break
        page.wait_for_timeout(100)
    message = page.evaluate("() => window.__messages[0]")
    assert message["context"] == "iframe.resize"
    assert isinstance(message["height"], int) and message["height"] > 300
