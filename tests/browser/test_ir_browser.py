"""The IR view in Chromium: source ↔ IR linking with and without JavaScript, search both
ways, the phone layout, and a 4 MB HLO read with no main-thread task over 200 ms."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.app.bench_fakes import capabilities
from tests.app.ir_runs import ATTENTION, attention_result, attention_with_pipeline, big_hlo
from tests.browser import checks
from tests.servers import SERVER_WORKER_TOKEN

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

LONG_TASK_MS = 200
"""The longest task the page may run on its main thread, as Chromium's long-task observer
times it (wall time). On an idle two-core machine the worst of the flow below is under
80 ms."""
WAIT_MS = 60_000
"""How long the flow waits for the view to load or change (a wait, not the measurement:
beside the suite the run page's 4 MB view once took over 10 s to come through htmx)."""
TRIES = 3
"""Beside the rest of the suite a busy machine stretches a task's wall time (a 682 ms
"task" once, when the same flow measured 78 ms idle; Chromium's own tracing inflates the
page's work even more, so its CPU times are no better a yardstick): the flow is read up
to three times and its best reading counts. A page that is slow is slow every time."""
SHOTS = Path(os.environ.get("BOUNDARY_SCREENSHOTS", "/tmp/boundary-screenshots"))


def _post(url: str, result: dict[str, Any]) -> str:
    """Queue `result`'s job on the server at `url`, lease it as a worker, post the result."""
    auth = {"Authorization": f"Bearer {SERVER_WORKER_TOKEN}"}
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/api/v1/jobs", json=result["job"]).status_code == 202
        registered = client.post(
            "/api/v1/worker/register",
            json={"capabilities": capabilities(), "name": "ir-test"},
            headers=auth,
        ).json()
        me = {k: registered[k] for k in ("worker_id", "worker_key")}
        grant = client.post("/api/v1/worker/lease", json={**me, "wait_s": 5}, headers=auth).json()
        body = {
            **me,
            "job_id": grant["job_id"],
            "attempt": grant["attempt"],
            "lease_id": grant["lease_id"],
            "result": {**result, "job": grant["spec"]},
            "run_seconds": 0.1,
        }
        posted = client.post("/api/v1/worker/result", json=body, headers=auth)
        assert posted.status_code == 200, posted.text[:300]
        job_id: str = grant["job_id"]
        return job_id


@pytest.fixture(scope="module")
def runs(reader_server: str) -> dict[str, Any]:
    """The session's server with no local worker, holding a real attention run and a 4 MB
    HLO run (each leased by a worker played here: nothing else queues jobs there)."""
    result = attention_result()
    piped = attention_with_pipeline()
    big = {**result, "artifacts": {**result["artifacts"], "hlo": big_hlo()}, "source": None}
    url = reader_server
    return {
        "url": url,
        "attention": _post(url, result),
        "big": _post(url, big),
        "piped": _post(url, piped),
        "source": result["source"],
    }


def _line(source: dict[str, Any], needle: str) -> int:
    lines = source["text"].split("\n")
    return int(source["first_line"]) + next(i for i, t in enumerate(lines) if needle in t)


@pytest.mark.parametrize("artifact", ["hlo", "stablehlo", "jaxpr"])
def test_linking_both_ways_with_javascript(page: Page, runs: dict[str, Any], artifact: str) -> None:
    page.goto(f"{runs['url']}/runs/{runs['attention']}")
    page.evaluate("window.__marker = 'no reload'")
    if artifact != "hlo":
        page.locator(f".tabs a[data-artifact='{artifact}']").click()
    view = page.locator(f".ir-view[data-artifact='{artifact}']")
    expect(view.locator(".ir-lines .l:not(.fb)").first).to_be_visible(timeout=10000)
    softmax = _line(runs["source"], "jax.nn.softmax")
    # Source → IR: every IR line from the softmax line lights up, in its colour.
    view.locator(f"#S-{softmax} a.n").click()
    marked = view.locator(f'.l.sel[data-src="{softmax}"]')
    expect(marked.first).to_be_visible()
    assert marked.count() == view.locator(f'.l[data-src="{softmax}"]').count() > 0
    expect(view.locator(f"#S-{softmax}")).to_have_class(re.compile(r"\bsel\b"))
    # IR → source: choosing an IR line from another source line selects that one instead.
    other = view.locator(f'.l[data-src]:not([data-src="{softmax}"])').first
    key = other.get_attribute("data-src")
    other.locator("a.sr").click()
    expect(view.locator(f"#S-{key}")).to_have_class(re.compile(r"\bsel\b"))
    expect(view.locator(f'.l.sel[data-src="{softmax}"]')).to_have_count(0)
    expect(view.locator(".ir-picked")).to_contain_text(f"Source line {key}")
    assert page.evaluate("window.__marker") == "no reload"


def test_linking_both_ways_without_javascript(browser: Any, runs: dict[str, Any]) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        base = f"{runs['url']}/runs/{runs['attention']}/ir/hlo"
        page.goto(base)
        softmax = _line(runs["source"], "jax.nn.softmax")
        page.locator(f"#S-{softmax} a.n").click()
        expect(page).to_have_url(re.compile(rf"\?src={softmax}#L\d+$"))
        expect(page.locator(f'.l.sel[data-src="{softmax}"]').first).to_be_visible()
        first = page.locator(".l[data-src]").first
        key = first.get_attribute("data-src")
        first.locator("a.sr").click()
        expect(page).to_have_url(re.compile(rf"\?src={key}#S-{key}$"))
        expect(page.locator(f"#S-{key}")).to_have_class(re.compile(r"\bsel\b"))
        # Search is a plain GET form.
        page.fill(".ir-q", "fusion(")
        page.keyboard.press("Enter")
        expect(page).to_have_url(re.compile(r"[?&]q=fusion%28"))
        expect(page.locator(".ir-status")).to_contain_text("matching line")
        assert page.locator(".l.hit").count() > 0
        assert page.locator(".l:not(.hit)").count() == 0
    finally:
        context.close()


def test_phone_width_stacks_source_above_ir_and_screenshots(
    browser: Any, runs: dict[str, Any]
) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height, name in ((1280, 900, "desktop"), (390, 844, "phone")):
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        try:
            page.goto(f"{runs['url']}/runs/{runs['attention']}/ir/hlo")
            source = page.locator(".ir-source").bounding_box()
            ir = page.locator(".ir-text").bounding_box()
            assert source and ir
            if name == "phone":
                assert source["y"] + source["height"] <= ir["y"] + 1  # stacked
                assert page.evaluate("document.documentElement.scrollWidth") <= width
            else:
                assert abs(source["y"] - ir["y"]) < 2 and source["x"] < ir["x"]  # side by side
            page.screenshot(path=str(SHOTS / f"ir-{name}.png"), full_page=False)
        finally:
            context.close()


LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver(function (list) {
  list.getEntries().forEach(function (e) { window.__longTasks.push(e.duration); });
}).observe({ type: "longtask", buffered: true });
"""


def worst_task(browser: Browser, runs: dict[str, Any]) -> tuple[float, str]:
    """The 4 MB HLO opened, scrolled to its end, folded and wrapped, searched, and its run
    page opened, in a fresh page: the longest task and the step it came in."""
    context = browser.new_context()
    try:
        return _read_worst_task(context.new_page(), runs)
    finally:
        context.close()


def _read_worst_task(page: Page, runs: dict[str, Any]) -> tuple[float, str]:
    page.add_init_script(LONG_TASKS)
    tasks: dict[str, list[float]] = {}

    def drain(step: str) -> None:
        page.wait_for_timeout(300)  # let the observer report
        tasks[step] = page.evaluate("window.__longTasks.splice(0)")

    page.goto(f"{runs['url']}/runs/{runs['big']}/ir/hlo")
    expect(page.locator(".ir-lines .l").first).to_be_visible(timeout=WAIT_MS)
    assert "of 4" in (page.locator(".ir-status").text_content() or "")  # 4x,xxx lines
    drain("open")
    pane = page.locator(".ir-text .ir-scroll")
    loaded = page.locator(".ir-lines .l").count()
    for i in range(3):  # scroll to the end: the next pages load as they come into view
        pane.evaluate("el => { el.scrollTop = el.scrollHeight; }")
        expect(page.locator(".ir-lines .l")).not_to_have_count(loaded, timeout=WAIT_MS)
        loaded = page.locator(".ir-lines .l").count()
        drain(f"scroll {i + 1}")
    for toggle in ("#ir-unfold", "#ir-wrap"):
        page.locator(toggle).check()
        drain(f"{toggle} on")
        page.locator(toggle).uncheck()
        drain(f"{toggle} off")
    page.fill(".ir-q", "exponential")
    expect(page.locator(".ir-status")).to_contain_text("matching lines", timeout=WAIT_MS)
    assert page.locator(".l.hit").count() == 200
    drain("search")
    # The same run's page loads the view through htmx, also without a long task.
    page.goto(f"{runs['url']}/runs/{runs['big']}")
    expect(page.locator(".ir-view[data-artifact='hlo'] .l").first).to_be_visible(timeout=WAIT_MS)
    drain("run page")
    return max((max(v, default=0), k) for k, v in tasks.items())


def test_a_4mb_hlo_opens_scrolls_and_searches_without_long_tasks(
    browser: Browser, runs: dict[str, Any]
) -> None:
    readings = []
    for _ in range(TRIES):
        readings.append(worst_task(browser, runs))
        if readings[-1][0] < LONG_TASK_MS:
            break
    best = min(readings)
    assert best[0] < LONG_TASK_MS, f"the best of {len(readings)} readings: {readings}"


def test_the_source_is_what_the_worker_sent(page: Page, runs: dict[str, Any]) -> None:
    page.goto(f"{runs['url']}/runs/{runs['attention']}/ir/jaxpr")
    assert ATTENTION["workload"] == "attention"
    expect(page.locator(".ir-source h3")).to_contain_text("workers/workloads/attention.py")
    expect(page.locator(".ir-source h3")).to_contain_text(runs["source"]["sha256"][:12])


@pytest.mark.parametrize("javascript", [True, False])
def test_the_pipeline_view_traces_a_fusion_to_its_pass(
    browser: Any, runs: dict[str, Any], javascript: bool
) -> None:
    context = browser.new_context(java_script_enabled=javascript)
    page = context.new_page()
    try:
        page.goto(f"{runs['url']}/runs/{runs['piped']}")
        page.get_by_role("link", name=re.compile("pass pipeline")).first.click()
        expect(page.get_by_role("heading", name="Passes in order")).to_be_visible()
        expect(page.locator("ol.passes li.changed").first).to_be_visible()
        expect(page.locator("ol.passes li.unchanged").first).to_be_attached()
        row = page.locator("tr[id^='o-']", has=page.locator("td", has_text=re.compile("^fusion$")))
        name = (row.first.get_attribute("id") or "")[2:]
        row.first.locator("td").nth(2).locator("a").click()
        expect(page).to_have_url(re.compile(r"\?step=\d+#diff$"))
        expect(page.locator("#diff .d-add", has_text=f"%{name} = ").first).to_be_attached()
        expect(page.locator("ol.passes li.current")).to_have_count(1)
    finally:
        context.close()


@pytest.fixture(scope="module")
def late_run(runs: dict[str, Any]) -> str:
    """The attention run with 600 lines before its HLO: every line a source line maps to
    is past the view's first page."""
    result = attention_result()
    filler = "\n".join(f"// line {i} of a long preamble" for i in range(600))
    artifacts = {**result["artifacts"], "hlo": filler + "\n" + result["artifacts"]["hlo"]}
    return _post(runs["url"], {**result, "artifacts": artifacts})


@pytest.mark.parametrize("viewport", list(checks.VIEWPORTS))
@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"])
def test_a_source_link_reaches_ir_lines_past_the_first_page(
    browser: Any, runs: dict[str, Any], late_run: str, javascript: bool, viewport: str
) -> None:
    size = checks.VIEWPORTS[viewport]
    context = browser.new_context(java_script_enabled=javascript, viewport=size)
    try:
        page = context.new_page()
        page.goto(f"{runs['url']}/runs/{late_run}/ir/hlo")
        softmax = _line(runs["source"], "jax.nn.softmax")
        expect(page.locator(f'.l[data-src="{softmax}"]')).to_have_count(0)  # not on page 1
        page.locator(f"#S-{softmax} a.n").click()
        marked = page.locator(f'.l.sel[data-src="{softmax}"]')
        expect(marked.first).to_be_visible(timeout=10000)
        assert f"src={softmax}" in page.url
        top = page.locator(".ir-lines .l").first.get_attribute("id") or ""
        assert int(top.removeprefix("L")) > 500  # the page that holds the line
        # It lands on the line: on the screen, whole across, and the address answers 200.
        expect(marked.first).to_be_in_viewport()
        box = marked.first.bounding_box()
        assert box is not None and box["x"] >= 0, box
        assert page.evaluate("document.documentElement.scrollWidth") <= size["width"]
        assert httpx.get(page.url.split("#")[0], timeout=30).status_code == 200
        checks.shot(page, f"ir-late-line-{viewport}-{'js' if javascript else 'nojs'}")
    finally:
        context.close()
