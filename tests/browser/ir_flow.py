"""A reader's way through a 4 MB HLO in the IR view, step by step, with what each step
left in the page: the lines shown, the elements they are made of, and the main-thread tasks
over 50 ms that Chromium's long-task observer saw.

tests/browser/test_ir_browser.py holds each step to the bounded work that keeps the page
responsive (elements and lines, which a loaded machine does not change);
bench/ir_view.py times the same steps (wall time, meaningful on a quiet machine only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playwright.sync_api import Page, expect

from app.ir.view import MAX_HITS
from tests import loopback
from tests.app.bench_fakes import capabilities
from tests.servers import SERVER_WORKER_TOKEN

LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver(function (list) {
  list.getEntries().forEach(function (e) { window.__longTasks.push(e.duration); });
}).observe({ type: "longtask", buffered: true });
window.__inserted = [];
new MutationObserver(function (records) {
  var lines = new Set();
  records.forEach(function (r) {
    r.addedNodes.forEach(function (node) {
      if (node.nodeType !== 1) return;
      if (node.matches(".ir-lines .l")) lines.add(node);
      node.querySelectorAll(".ir-lines .l").forEach(function (l) { lines.add(l); });
    });
  });
  if (lines.size) window.__inserted.push(lines.size);
}).observe(document, { childList: true, subtree: true });
"""
"""Installed before any page script: collects each long task's duration (ms), and the IR
lines each batch of DOM changes inserted (a batch is what one task changed)."""

WAIT_MS = 60_000
"""How long a step waits for the view to load or change (a wait, not a measurement: beside
the test suite the run page's 4 MB view once took over 10 s to come through htmx)."""

SETTLE_MS = 300
"""After a step, the time given to the observer to report its tasks."""


@dataclass(frozen=True)
class Step:
    """What one step of the flow left in the page."""

    name: str
    lines: int
    """IR lines in the document (`.ir-lines .l`)."""
    elements: int
    """Elements inside the view's lines (`.ir-lines *`), each line's markup included."""
    largest_insert: int
    """The most IR lines one batch of DOM changes inserted since the previous step."""
    long_tasks: tuple[float, ...]
    """The durations (ms) of the long tasks since the previous step."""
    parts: int = 0
    """The parts of lines (`part=lines` with a start) the page asked for since the previous
    step."""


def _landed(page: Page) -> None:
    """Wait until no part of lines is still coming (a part lands a chunk per task)."""
    expect(page.locator(".ir-more[data-loading]")).to_have_count(0, timeout=WAIT_MS)


def _step(page: Page, name: str, asked: list[str]) -> Step:
    _landed(page)
    page.wait_for_timeout(SETTLE_MS)
    _landed(page)  # a part asked for while the observer settled lands before the step is read
    lines = page.locator(".ir-lines .l").count()
    elements = int(page.evaluate("document.querySelectorAll('.ir-lines *').length"))
    inserted = max(page.evaluate("window.__inserted.splice(0)"), default=0)
    tasks = tuple(float(t) for t in page.evaluate("window.__longTasks.splice(0)"))
    parts = sum(1 for url in asked if "part=lines" in url and "start=" in url)
    asked.clear()
    return Step(name, lines, elements, int(inserted), tasks, parts)


def read_big_view(page: Page, url: str, run_id: str) -> list[Step]:
    """Open run `run_id`'s HLO view (a 4 MB module), scroll to its end, fold and wrap,
    search, then open its run page (the view comes through htmx there)."""
    page.add_init_script(LONG_TASKS)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    steps: list[Step] = []
    page.goto(f"{url}/runs/{run_id}/ir/hlo")
    expect(page.locator(".ir-lines .l").first).to_be_visible(timeout=WAIT_MS)
    assert "of 4" in (page.locator(".ir-status").text_content() or "")  # 4x,xxx lines
    steps.append(_step(page, "open", asked))
    pane = page.locator(".ir-text .ir-scroll")
    for i in range(3):  # scroll to the end: the next pages load as they come into view
        pane.evaluate("el => { el.scrollTop = el.scrollHeight; }")
        shown = page.locator(".ir-lines .l")
        expect(shown).not_to_have_count(steps[-1].lines, timeout=WAIT_MS)
        steps.append(_step(page, f"scroll {i + 1}", asked))
    for toggle in ("#ir-unfold", "#ir-wrap"):
        page.locator(toggle).check()
        steps.append(_step(page, f"{toggle} on", asked))
        page.locator(toggle).uncheck()
        steps.append(_step(page, f"{toggle} off", asked))
    page.fill(".ir-q", "exponential")
    expect(page.locator(".ir-status")).to_contain_text("matching lines", timeout=WAIT_MS)
    assert page.locator(".l.hit").count() == MAX_HITS  # of many more matching lines
    steps.append(_step(page, "search", asked))
    page.goto(f"{url}/runs/{run_id}")
    view = page.locator(".ir-view[data-artifact='hlo'] .l")
    expect(view.first).to_be_visible(timeout=WAIT_MS)
    steps.append(_step(page, "run page", asked))
    return steps


def post_run(url: str, result: dict[str, Any]) -> str:
    """Queue `result`'s job on the server at `url`, lease it as a worker (SERVER_WORKER_TOKEN),
    post the result; the job's id."""
    auth = {"Authorization": f"Bearer {SERVER_WORKER_TOKEN}"}
    with loopback.Client(base_url=url, timeout=60) as client:
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
