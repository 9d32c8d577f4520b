"""A profiled CPU run's timeline, opened on its page in Chromium with the network off.

The shared `boundary serve` (bench_server) and its local worker make the run (a few jitted
matmuls under the JAX profiler); the page is opened at 390 and 1280 px with every request
that is not to the test server aborted and recorded. What a person sees: the viewer opens
on the thread that ran the compiled program's XLA op; the page's own buttons for its views,
threads and zoom are whole on the screen at both widths and work; no emoji is drawn as an
empty box; stepping through the threads finds the jitted function's calls; on a phone, a
tap on a frame names it with its duration.
"""

from __future__ import annotations

import re
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Browser, Locator, Page, Route, expect

from tests import loopback
from tests.browser import checks

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

CALL = "PjitFunction(jit(matmul))"


@pytest.fixture(scope="module")
def profiled(bench_server: str) -> tuple[str, str]:
    """(server URL, the id of a finished profiled run on it)."""
    body = {
        "workload": "matmul",
        "params": {"m": 128, "n": 128, "k": 128},
        "measure": {"samples": 6, "profile": True},
    }
    job_id = loopback.post(bench_server + "/api/v1/jobs", json=body).json()["id"]
    deadline = time.monotonic() + 180
    status = "queued"
    while status in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
        status = loopback.get(f"{bench_server}/api/v1/jobs/{job_id}").json()["status"]
    assert status == "done", status
    return bench_server, job_id


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


def viewer_text(visit: Visit) -> str:
    return visit.page.frame_locator("iframe.timeline").locator("body").inner_text()


def heading(visit: Visit, number: int) -> Locator:
    """The viewer's heading for the thread shown, `number` of them."""
    frame = visit.page.frame_locator("iframe.timeline")
    return frame.get_by_text(
        re.compile(rf"^/host:CPU \(pid \d+\),\s+.+ \(tid \d+\)\s*\({number}/\d+\)$")
    )


def click(visit: Visit, name: str) -> None:
    """Click one of the page's buttons for the viewer, as a person taps it."""
    visit.page.locator(".timeline-controls").get_by_role("button", name=name, exact=True).click()
    visit.page.wait_for_timeout(300)


def picture(visit: Visit) -> bytes:
    """The viewer's pixels: its screenshot's image data, decompressed (Chromium may
    compress the same pixels differently from one screenshot to the next)."""
    png = visit.page.locator("iframe.timeline").screenshot()
    at, data = 8, b""
    while at < len(png):
        (size,) = struct.unpack(">I", png[at : at + 4])
        if png[at + 4 : at + 8] == b"IDAT":
            data += png[at + 8 : at + 8 + size]
        at += 12 + size
    return zlib.decompress(data)


def alike(a: bytes, b: bytes) -> bool:
    """Whether two pictures show the same view: all but 0.05% of their bytes agree
    (the title bar redrew 36 bytes of 2,166,261 between two screenshots; a zoom changes
    about 0.6%)."""
    if len(a) != len(b):
        return False
    return sum(x != y for x, y in zip(a, b, strict=True)) <= len(a) // 2000


def settled(visit: Visit, within_s: float = 10.0) -> bytes:
    """The viewer's picture once two screenshots in a row agree (it may still be drawing)."""
    deadline = time.monotonic() + within_s
    last = picture(visit)
    while time.monotonic() < deadline:
        now = picture(visit)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the timeline kept changing for {within_s} s")


def comes_to(visit: Visit, wanted: Callable[[bytes], bool], within_s: float = 15.0) -> bool:
    """Whether the viewer's picture comes to one `wanted` accepts within `within_s` (a
    zoom is drawn over several frames, later on a busy machine)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if wanted(picture(visit)):
            return True
    return False


# Elements in the viewer a person sees whose text is only emoji: empty boxes where the
# machine has no emoji font (this one has none).
_EMOJI_ONLY = """() => [...document.querySelectorAll('body *')].filter(el =>
  el.children.length === 0 && el.getClientRects().length &&
  /^[\\p{Extended_Pictographic}\\uFE0F\\s]+$/u.test(el.textContent)).map(el => el.textContent)"""


@pytest.mark.parametrize("viewport", list(checks.VIEWPORTS))
def test_the_timeline_opens_offline_on_the_xla_ops_with_buttons_for_a_phone(
    browser: Browser, profiled: tuple[str, str], viewport: str
) -> None:
    base, job_id = profiled
    size = checks.VIEWPORTS[viewport]
    visit = offline_page(browser, base, size)
    visit.page.goto(f"{base}/runs/{job_id}")
    visit.page.get_by_role("link", name="Open the timeline").click()
    visit.page.wait_for_url(f"{base}/runs/{job_id}/profile/timeline")
    assert visit.page.get_by_role("heading", name="Timeline of the profiled calls").is_visible()
    assert visit.page.get_by_role("link", name="Download the trace").is_visible()
    # The viewer read the run's trace and opens on the thread that ran XLA's ops.
    heading(visit, 1).wait_for(timeout=30_000)
    visit.page.locator("iframe.timeline").scroll_into_view_if_needed()
    visit.page.wait_for_timeout(500)
    checks.shot(visit.page, f"timeline-{viewport}")
    # Every button is whole on the screen, and the page does not scroll sideways.
    buttons = visit.page.locator(".timeline-controls button")
    assert buttons.count() == 10
    for button in buttons.all():
        box = button.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= size["width"], box
    sideways = checks.overflow(visit.page)
    assert sideways["scroll"] <= sideways["width"], sideways
    # No empty boxes where emoji were, and none of the viewer's own tabs cut off.
    frame = visit.page.frames[1]
    assert frame.evaluate(_EMOJI_ONLY) == []
    shown = viewer_text(visit)
    for hidden in ("Time Order", "Left Heavy", "Import", "Export", "Help"):
        assert hidden not in shown, hidden
    # Zoom in moves the picture, the whole trace brings it back; the table has no zoom.
    whole = settled(visit)
    click(visit, "In")
    click(visit, "Later")
    assert comes_to(visit, lambda now: not alike(now, whole))
    click(visit, "Whole trace")
    assert comes_to(visit, lambda now: alike(now, whole))
    # The table by self time of the first thread holds the compiled program's op.
    click(visit, "Sandwich")
    expect(visit.page.get_by_role("button", name="Sandwich")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(visit.page.get_by_role("button", name="In", exact=True)).to_be_disabled()
    ops = viewer_text(visit)
    assert "Total" in ops and "Self" in ops, ops[:300]
    assert '"hlo_module":"jit_matmul"' in ops and "ynn_fusion" in ops, ops[:400]
    checks.shot(visit.page, f"timeline-{viewport}-xla-op")
    # Stepping through the threads reaches the one that called the jitted function.
    calls = None
    for number in range(2, 9):
        click(visit, "Next")
        heading(visit, number).wait_for(timeout=5_000)
        if CALL in viewer_text(visit):
            calls = viewer_text(visit)
            break
    assert calls is not None, "no thread holds the jitted calls"
    assert re.search(r"\d+(\.\d+)?(µs|ms) \(\d+(\.\d+)?%\)", calls), calls[:400]
    checks.shot(visit.page, f"timeline-{viewport}-calls")
    click(visit, "Time order")
    expect(visit.page.get_by_role("button", name="In", exact=True)).to_be_enabled()
    assert visit.left == [], visit.left  # nothing asked for another origin
    assert visit.errors == [], visit.errors
    visit.page.close()


def test_a_tap_on_a_frame_names_it_with_its_duration(
    browser: Browser, profiled: tuple[str, str]
) -> None:
    """On a phone (touch, no mouse, no keys) a tap on a frame of the chart says what it is."""
    base, job_id = profiled
    phone = checks.VIEWPORTS["phone"]
    context = browser.new_context(viewport=phone, has_touch=True, is_mobile=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.goto(f"{base}/runs/{job_id}/profile/timeline")
    frame = page.locator("iframe.timeline")
    page.frame_locator("iframe.timeline").get_by_text(re.compile(r"\(1/\d+\)$")).wait_for(
        timeout=30_000
    )
    frame.scroll_into_view_if_needed()
    box = frame.bounding_box()
    assert box is not None
    text = ""
    for x in range(4, int(box["width"]) - 4, 4):  # along the first row of the chart
        page.touchscreen.tap(box["x"] + x, box["y"] + 183)
        page.wait_for_timeout(100)
        text = page.frame_locator("iframe.timeline").locator("body").inner_text()
        if "This Instance" in text:
            break
    assert "This Instance" in text and "ynn_fusion" in text, text[:400]
    assert re.search(r"\d+(\.\d+)?(ns|µs|ms)", text.split("This Instance", 1)[1]), text[:400]
    checks.shot(page, "timeline-phone-tapped")
    context.close()


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
        assert href and loopback.get(base + href, timeout=30).status_code == 200, href
    # No blank box where the viewer would be.
    expect(page.locator("iframe.timeline")).to_be_hidden()
    checks.shot(page, f"timeline-nojs-{viewport}")
    context.close()
