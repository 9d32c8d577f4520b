"""A profiled CPU run's timeline, opened on its page in Chromium with the network off.

A real `boundary serve` and its local worker make the run (a few jitted matmuls under the
JAX profiler); the page is opened at 390 and 1280 px with every request that is not to
the test server aborted and recorded. What a person sees: the viewer opens on the thread
that made the calls, a tooltip names the jitted function, the table by self time counts
its calls, and stepping through the threads finds the XLA op the compiled program ran.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.browser import checks
from tests.browser.conftest import serve

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

CALL = "PjitFunction(jit(matmul))"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(server URL, the id of a finished profiled run on it)."""
    for url in serve(tmp_path_factory.mktemp("timeline"), workers=1):
        body = {
            "workload": "matmul",
            "params": {"m": 128, "n": 128, "k": 128},
            "measure": {"samples": 6, "profile": True},
        }
        job_id = httpx.post(url + "/api/v1/jobs", json=body).json()["id"]
        deadline = time.monotonic() + 180
        status = "queued"
        while status in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.5)
            status = httpx.get(f"{url}/api/v1/jobs/{job_id}").json()["status"]
        assert status == "done", status
        yield url, job_id


@dataclass
class Visit:
    """A page opened with every request off the test server aborted, and what it logged."""

    page: Page
    left: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def offline_page(browser: Browser, base: str, size: dict[str, int]) -> Visit:
    page = browser.new_page(viewport=size)  # type: ignore[arg-type]
    visit = Visit(page)

    def guard(route: Route) -> None:
        if route.request.url.startswith(base + "/"):
            route.continue_()
        else:
            visit.left.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    page.on("console", lambda m: visit.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: visit.errors.append(str(e)))
    return visit


def focus_viewer(visit: Visit) -> None:
    """Click into the viewer's chart, as a person does before using its keys."""
    frame = visit.page.locator("iframe.timeline")
    frame.scroll_into_view_if_needed()
    box = frame.bounding_box()
    assert box is not None
    frame.click(position={"x": box["width"] / 2, "y": 200})


def press(visit: Visit, key: str) -> None:
    visit.page.keyboard.press(key)
    visit.page.wait_for_timeout(300)


def viewer_text(visit: Visit) -> str:
    return visit.page.frame_locator("iframe.timeline").locator("body").inner_text()


def table_rows_matching(visit: Visit, query: str) -> str:
    """The table by self time (key 3, "Sandwich") filtered by the viewer's search box
    (Ctrl+F), as a person looks a frame up: the rows under its heading."""
    focus_viewer(visit)
    press(visit, "3")
    press(visit, "Control+f")
    visit.page.keyboard.type(query)
    visit.page.wait_for_timeout(500)
    text = viewer_text(visit)
    assert "Total" in text and "Self" in text, text[:300]
    return text


def thread_with_row(visit: Visit, needle: str, threads: int = 8) -> str | None:
    """Step through the threads (key n) until the filtered table shows `needle`."""
    for _ in range(threads):
        text = viewer_text(visit)
        if needle in text:
            return text
        focus_viewer(visit)
        press(visit, "n")
    return None


@pytest.mark.parametrize("viewport", list(checks.VIEWPORTS))
def test_the_timeline_opens_offline_on_the_calls_and_their_xla_op(
    browser: Browser, profiled: tuple[str, str], viewport: str
) -> None:
    base, job_id = profiled
    visit = offline_page(browser, base, checks.VIEWPORTS[viewport])
    visit.page.goto(f"{base}/runs/{job_id}")
    visit.page.get_by_role("link", name="Open the timeline").click()
    visit.page.wait_for_url(f"{base}/runs/{job_id}/profile/timeline")
    assert visit.page.get_by_role("heading", name="Timeline of the profiled calls").is_visible()
    assert visit.page.get_by_role("link", name="Download the trace").is_visible()
    frame = visit.page.frame_locator("iframe.timeline")
    # The viewer read the run's trace and opens on the thread that made the calls.
    heading = frame.get_by_text(re.compile(r"^/host:CPU \(pid \d+\), .+ \(tid 0\)\s*\(1/\d+\)$"))
    heading.wait_for(timeout=30_000)
    visit.page.wait_for_timeout(500)
    checks.shot(visit.page, f"timeline-{viewport}")
    # Looked up in the table by self time, the jitted function's calls show with their time.
    rows = table_rows_matching(visit, "PjitFunction")
    assert re.search(re.escape(CALL), rows), rows[:400]
    assert re.search(r"\d+(\.\d+)?(µs|ms) \(\d+(\.\d+)?%\)", rows), rows[:400]
    checks.shot(visit.page, f"timeline-{viewport}-calls")
    # The compiled program's op runs on another thread, named with its module.
    press(visit, "Escape")
    ops = table_rows_matching(visit, "ynn_fusion")
    ops = thread_with_row(visit, '"hlo_module":"jit_matmul"') or ops
    assert '"hlo_module":"jit_matmul"' in ops and "ynn_fusion" in ops, ops[:400]
    checks.shot(visit.page, f"timeline-{viewport}-xla-op")
    assert visit.left == [], visit.left  # nothing asked for another origin
    assert visit.errors == [], visit.errors
    visit.page.close()


@pytest.mark.parametrize("viewport", list(checks.VIEWPORTS))
def test_without_javascript_the_timeline_says_why_and_offers_the_downloads(
    browser: Browser, profiled: tuple[str, str], viewport: str
) -> None:
    base, job_id = profiled
    context = browser.new_context(java_script_enabled=False, viewport=checks.VIEWPORTS[viewport])
    page = context.new_page()
    page.goto(f"{base}/runs/{job_id}/profile/timeline")
    note = page.locator(".timeline-nojs")
    expect(note).to_be_visible()
    expect(note).to_contain_text("The timeline viewer needs JavaScript")
    for name in ("the trace (.json.gz)", "the profiler's log directory"):
        link = note.get_by_role("link", name=name)
        expect(link).to_be_visible()
        href = link.get_attribute("href")
        assert href and httpx.get(base + href, timeout=30).status_code == 200, href
    # No blank box where the viewer would be.
    expect(page.locator("iframe.timeline")).to_be_hidden()
    checks.shot(page, f"timeline-nojs-{viewport}")
    context.close()
