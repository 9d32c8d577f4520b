"""The memory report in Chromium, at a phone's 390×844 and a laptop's 1280×800, with
JavaScript on and off: a bf16 program compiled for one v6e chip (without the hardware, by
`boundary serve`'s own worker) opens on its run page's Memory section from the table of
contents; its curve, its peak by kind and its buffers table are there and readable (no
sideways scrolling of the page, no picture text under 12 px); the memory page lists every
buffer with its padding, and a buffer's instruction link opens the HLO view on it.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests import loopback
from tests.browser import checks
from tests.browser.conftest import wait_for_target

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
    link = page.locator("table.memory-buffers tbody tr").first.locator("td").nth(2).locator("a")
    name = link.inner_text()
    link.scroll_into_view_if_needed()
    link.click()
    expect(page.locator("main")).to_contain_text(f"%{name} =")
    assert watch.console == [] and watch.failed == []
