"""The memory report in Chromium, at a phone's 390×844 and a laptop's 1280×800, with
JavaScript on and off: a bf16 program compiled for one v6e chip (without the hardware, by
`boundary serve`'s own worker) opens on its run page's Memory section from the table of
contents; its curve, its peak by kind and its buffers table are there and readable (no
sideways scrolling of the page, no picture text under 12 px); the memory page lists every
buffer with its padding, and a buffer's instruction link opens the HLO view on it. The
tests' own optax train step, uploaded and compiled for h100:1: at 390 px each buffer is a
card whose source (the user's line, optax's beside it, or a parameter's path) is on
screen, nothing scrolls sideways; at 1280 px the table fits its box and no op name wraps
past its one joint.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests import loopback
from tests.browser import checks
from tests.browser.conftest import upload_exported, wait_for_target

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

BF16 = {"m": 1000, "n": 1000, "k": 1000, "dtype": "bfloat16"}
PICTURES = "svg.memory-curve, svg.memory-kinds"


@pytest.fixture(scope="module")
def memory_run(bench_server: str) -> tuple[str, str]:
    """The server, and a finished compile of a bf16 matmul for one v6e chip."""
    wait_for_target(bench_server, "v6e:1x1")
    body = {"workload": "matmul", "path": "jax-tpu", "target": "v6e:1x1", "params": BF16}
    r = loopback.post(bench_server + "/api/v1/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text
    job = str(r.json()["id"])
    deadline = time.monotonic() + 240
    found: dict[str, Any] = {"status": "queued"}
    # Done, and its follow-up (the bundles) too: a page that polls for pending dumps
    # would have that request cut when a test leaves it.
    while time.monotonic() < deadline and (
        found["status"] in ("queued", "running") or (found.get("dumps") or {}).get("pending")
    ):
        time.sleep(0.5)
        found = loopback.get(f"{bench_server}/api/v1/jobs/{job}", timeout=10).json()
    assert found["status"] == "done", found["status"]
    return bench_server, job


def finished(server: str, body: dict[str, Any]) -> str:
    """Queue `body` and wait until it and its follow-up (the dumps) are done; its id."""
    r = loopback.post(server + "/api/v1/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text
    job = str(r.json()["id"])
    deadline = time.monotonic() + 240
    found: dict[str, Any] = {"status": "queued"}
    while time.monotonic() < deadline and (
        found["status"] in ("queued", "running") or (found.get("dumps") or {}).get("pending")
    ):
        time.sleep(0.5)
        found = loopback.get(f"{server}/api/v1/jobs/{job}", timeout=10).json()
    assert found["status"] == "done", found["status"]
    return job


@pytest.fixture(scope="module")
def uploaded_run(bench_server: str, own_exports: dict[str, Any]) -> tuple[str, str]:
    """The server, and the tests' own optax train step uploaded and compiled for h100:1."""
    wait_for_target(bench_server, "h100:1")
    sha = upload_exported(bench_server, own_exports["train"].artifact.read_bytes())
    params = {"artifact": sha}
    body = {"workload": "exported", "path": "jax-gpu", "target": "h100:1", "params": params}
    return bench_server, finished(bench_server, {**body, "stages": ["compile"]})


def readable(page: Page, name: str) -> None:
    """No sideways scrolling of the page, no picture text too small, a screenshot."""
    found = checks.overflow(page)
    assert found["scroll"] <= found["width"] + 1, found["culprits"]
    sizes: list[dict[str, Any]] = page.evaluate(checks._FONT_SIZES, PICTURES)
    assert sizes and not [s for s in sizes if s["px"] < checks.MIN_FONT_PX]
    checks.shot(page, name)


@pytest.mark.parametrize("size", ["phone", "desktop"])
def test_the_memory_section_and_page_read_at_both_sizes(
    any_page: Page, memory_run: tuple[str, str], size: str
) -> None:
    server, job = memory_run
    page = any_page
    js = "js" if page.js else "nojs"  # type: ignore[attr-defined]
    watch = checks.Watch()
    watch.attach(page)
    page.set_viewport_size(checks.VIEWPORTS[size])  # type: ignore[arg-type]
    page.goto(f"{server}/runs/{job}")
    page.locator("nav.run-nav").get_by_role("link", name="memory", exact=True).click()
    expect(page).to_have_url(re.compile("#memory-h$"))
    expect(page.locator("#memory-h")).to_be_in_viewport()
    section = page.locator("section.memory-report")
    expect(section.locator("svg.memory-curve")).to_be_visible()
    expect(section.locator("svg.memory-kinds")).to_be_visible()
    expect(section).to_contain_text("compiler's plan for one device")
    expect(section.locator("table.memory-buffers tbody tr").first).to_be_visible()
    readable(page, f"memory-section-{size}-{js}")

    page.goto(f"{server}/runs/{job}/memory")
    rows = page.locator("table.memory-buffers tbody tr")
    assert rows.count() >= 3  # two arguments and the result, at least
    expect(page.locator("td.has-padding").first).to_be_visible()  # bf16 [1000, 1000] pads
    readable(page, f"memory-page-{size}-{js}")
    link = page.locator("table.memory-buffers tbody tr").first.locator("td.instruction a")
    name = link.inner_text()
    link.scroll_into_view_if_needed()
    link.click()
    expect(page.locator("main")).to_contain_text(f"%{name} =")
    assert watch.console == [] and watch.failed == []


# Per buffer card (phone) or op-name cell (desktop): its box and its text's line height.
_BOXES = """(selector) => [...document.querySelectorAll(selector)].map((e) => {
  const r = e.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, height: r.height,
          line: parseFloat(getComputedStyle(e).lineHeight), text: e.innerText};
})"""
_REGION = """() => {
  const r = document.querySelector("table.memory-buffers").parentElement;
  return {scroll: r.scrollWidth, width: r.clientWidth};
}"""


def test_at_a_phones_width_each_buffer_is_a_card_with_its_source_on_screen(
    page: Page, uploaded_run: tuple[str, str]
) -> None:
    server, job = uploaded_run
    page.set_viewport_size(checks.VIEWPORTS["phone"])  # type: ignore[arg-type]
    page.goto(f"{server}/runs/{job}/memory")
    checks.shot(page, "memory-upload-phone")
    region = page.evaluate(_REGION)
    assert region["scroll"] <= region["width"] + 1  # the table does not scroll sideways
    found = checks.overflow(page)
    assert found["scroll"] <= found["width"] + 1, found["culprits"]
    sources: list[dict[str, Any]] = page.evaluate(_BOXES, "table.memory-buffers td.source")
    assert sources and all(s["left"] >= 0 and s["right"] <= 390 for s in sources)
    said = [s["text"] for s in sources]
    assert any("own_model.py:" in t and "optax/" in t for t in said)  # the library beside
    assert any("argument params/" in t for t in said) and not any("leaves" in t for t in said)
    cards: list[dict[str, Any]] = page.evaluate(_BOXES, "table.memory-buffers tbody tr")
    assert max(c["height"] for c in cards) < 200, max(cards, key=lambda c: c["height"])["text"]


def test_at_a_laptops_width_op_names_wrap_only_at_their_joints(
    page: Page, uploaded_run: tuple[str, str]
) -> None:
    server, job = uploaded_run
    page.set_viewport_size(checks.VIEWPORTS["desktop"])  # type: ignore[arg-type]
    page.goto(f"{server}/runs/{job}/memory")
    region = page.evaluate(_REGION)
    assert region["scroll"] <= region["width"] + 1
    names: list[dict[str, Any]] = page.evaluate(_BOXES, "table.memory-buffers td.op-name code")
    assert names
    for n in names:  # a short name on one line; a long one broken only at its joints
        lines = round(n["height"] / n["line"])
        joints = n["text"].count("/") + n["text"].count(";")
        assert lines <= min(joints + 1, 3), n
        assert len(n["text"]) > 30 or lines == 1, n
    checks.shot(page, "memory-upload-desktop")
