"""What a new user trips on, in Chromium with JavaScript on and off, against a real server
with its real local CPU worker: the broken pages, the run flow (a runnable default, landing
on the run with its verdict in view, Cancel), compare's one verdict, and the pasted embed
snippet resizing on another origin. No page visited may log a console error or a failed
request."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests import loopback

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

DESKTOP = {"width": 1280, "height": 800}
JS = pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])


class Watched:
    """A page whose console errors, uncaught exceptions and failed requests are kept."""

    def __init__(self, browser: Browser, js: bool, viewport: dict[str, int]) -> None:
        self.context = browser.new_context(java_script_enabled=js, viewport=viewport)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.expected_status: set[str] = set()
        """Pages visited on purpose for their 4xx (Chromium logs each one's status)."""
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
        self.page.on("requestfailed", self._failed)

    def _failed(self, request: Any) -> None:
        # The browser fetches the favicon on its own and drops it when the test moves on
        # to the next page; every request a page makes itself must succeed.
        if "/static/favicon.svg" not in request.url:
            self.problems.append(f"failed: {request.url} {request.failure}")

    def _console(self, message: Any) -> None:
        where = message.location.get("url", "")
        if message.type != "error" or (
            "responded with a status of 4" in message.text and where in self.expected_status
        ):
            return
        self.problems.append(f"console: {message.text} at {where or self.page.url}")

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def watched(browser: Browser) -> Iterator[Any]:
    """A function making watched pages; at the end, no page may have had a problem."""
    made: list[Watched] = []

    def make(js: bool = True, viewport: dict[str, int] | None = None) -> Watched:
        w = Watched(browser, js, viewport or DESKTOP)
        made.append(w)
        return w

    yield make
    problems = [p for w in made for p in w.problems]
    for w in made:
        w.close()
    assert problems == []


@pytest.fixture(scope="module")
def server(bench_server: str) -> str:
    """The bench server once its local worker has registered (it first starts JAX)."""
    for _ in range(600):
        if loopback.get(bench_server + "/api/v1/workers", timeout=10).json()["count"]:
            return bench_server
        threading.Event().wait(0.1)
    raise AssertionError("the local worker never registered")


def submit(base: str, spec: dict[str, Any]) -> str:
    r = loopback.post(base + "/api/v1/jobs", json=spec, timeout=10)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


def wait_done(base: str, job_id: str) -> None:
    for _ in range(600):
        status = loopback.get(f"{base}/api/v1/jobs/{job_id}", timeout=10).json()["status"]
        if status in ("done", "failed", "expired", "cancelled"):
            assert status == "done"
            return
        threading.Event().wait(0.1)
    raise AssertionError(f"job {job_id} did not finish")


@JS
def test_broken_pages_are_site_pages(watched: Any, server: str, js: bool) -> None:
    w = watched(js)
    page = w.page
    created = loopback.post(
        server + "/api/v1/matrices",
        json={
            "workload": "matmul",
            "axis": {"name": "shape", "values": [{"m": 16, "n": 16, "k": 16}]},
            "paths": ["jax-cpu"],
            "measure": {"samples": 3},
        },
        timeout=10,
    )
    assert created.status_code == 201, created.text
    response = page.goto(server + "/matrices")
    assert response is not None and response.status == 200
    expect(page.locator(f'a[href="/matrices/{created.json()["id"]}"]')).to_be_visible()
    # A missing run and a comparison of a missing run: each section's own page, with
    # the site's navigation, never the reader's list of paths.
    for url, heading in (
        ("/runs/0123456789abcdef", "No such run"),
        ("/compare?a=0123456789abcdef", "Compare runs"),
    ):
        w.expected_status.add(server + url)
        missing = page.goto(server + url)
        assert missing is not None and missing.status == 404
        expect(page.locator("h1")).to_have_text(heading)
        expect(page.get_by_role("navigation", name="Site")).to_be_visible()
        expect(page.get_by_text("Valid paths")).to_have_count(0)


def test_the_readers_form_starts_on_a_runnable_choice_and_follows_the_reader(
    watched: Any, server: str
) -> None:
    page = watched(True).page
    page.goto(server + "/read/jax-gpu/compile")
    path = page.locator("#run-form select[name=path]")
    # No GPU here, but the local worker compiles for B200s without one: the form starts
    # there, compile only, and says why.
    expect(path).to_have_value("jax-gpu")
    expect(page.locator("#run-form select[name=target]")).to_have_value("b200:1")
    expect(page.locator("#path-note")).to_contain_text("No connected worker runs jax-gpu")
    expect(page.locator("#run-form input[name=stages]:checked")).to_have_count(1)
    # Choose CUDA in the reader: the form follows, and ticks only what a worker can do.
    page.locator('#reader a[data-path="cuda"]').click()
    expect(path).to_have_value("cuda")
    stages = page.locator("#run-form input[name=stages]:checked")
    expect(stages).to_have_count(1)
    expect(stages).to_have_value("compile")
    expect(page.locator("#run-form [name='param.kernel']")).to_have_count(1)
    # Back on a JAX path the kernel field offers XLA's kernels or Pallas, never CUDA's,
    # and measurement options stay typed.
    page.locator('#reader a[data-path="jax-tpu"]').click()
    expect(path).to_have_value("jax-tpu")
    expect(page.locator("#run-form select[name=target]")).to_have_value("v6e:1x1")
    expect(page.locator("#run-form [name='param.kernel'] option")).to_have_text(["xla", "pallas"])
    page.fill("#m-samples", "50")
    page.select_option("#f-workload", "elementwise")
    expect(page.locator("#run-form [name='param.m']")).to_have_count(0)
    expect(page.locator("#m-samples")).to_have_value("50")
    expect(page.locator("#run-form input[name=token]")).to_have_count(0)


def test_without_javascript_the_form_also_starts_on_a_runnable_choice(
    watched: Any, server: str
) -> None:
    page = watched(False).page
    page.goto(server + "/read/jax-gpu/compile")
    page.get_by_role("link", name="Open the run form").click()
    expect(page.locator("select[name=path]")).to_have_value("jax-gpu")
    expect(page.locator("select[name=target]")).to_have_value("b200:1")
    expect(page.locator("#path-note")).to_be_visible()
    page.select_option("select[name=path]", "cuda")
    page.fill("#m-samples", "40")
    page.get_by_role("button", name="Update the form for this path").click()
    expect(page.locator("select[name=path]")).to_have_value("cuda")
    expect(page.locator("input[name=stages]:checked")).to_have_count(1)
    expect(page.locator("#m-samples")).to_have_value("40")


@JS
def test_submit_lands_on_the_run_with_its_verdict_in_view(
    watched: Any, server: str, js: bool
) -> None:
    page = watched(js).page
    start = server + ("/read/jax-gpu/execute" if js else "/runs/new?path=jax-gpu")
    page.goto(start)
    # The form starts on a B200 compile (no GPU here); a hurried user wants a timed run on
    # the CPU that is here: choosing jax-cpu clears the target and ticks execute.
    expect(page.locator("select[name=path]")).to_have_value("jax-gpu")
    page.select_option("select[name=path]", "jax-cpu")
    if not js:
        page.get_by_role("button", name="Update the form for this path").click()
    expect(page.locator("select[name=path]")).to_have_value("jax-cpu")
    expect(page.locator("input[name=stages][value=execute]")).to_be_checked()
    page.fill("#p-m", "64")
    page.fill("#m-samples", "8")
    form_url = page.url  # without JavaScript, the form updated for jax-cpu is its own page
    page.click("#queue-run")
    expect(page).to_have_url(re.compile(re.escape(server) + r"/runs/[0-9a-f]{16}$"))
    job_id = page.url.rsplit("/", 1)[1]
    expect(page).to_have_title(f"matmul on jax-cpu · run {job_id} · Boundary")
    verdict = page.locator("#verdict")
    expect(verdict).to_contain_text("Correct within tolerance", timeout=90000)
    expect(verdict).to_be_in_viewport()
    assert page.evaluate("() => window.scrollY") == 0
    expect(page.locator("h1")).to_have_count(1)
    expect(page.locator("#run-badge")).to_have_text("done")
    # A JAX run names its implementation (XLA's kernels), never a CUDA variant.
    expect(page.locator(".reproduce")).to_contain_text("kernel=xla --path jax-cpu")
    expect(page.locator(".reproduce")).not_to_contain_text("kernel=tiled")
    if js:  # read the compiler output before going back (leaving aborts its loading)
        expect(page.locator(".ir-view .ir-lines").first).to_be_visible(timeout=20000)
    page.go_back()
    expect(page).to_have_url(form_url)


@JS
def test_a_queued_run_can_be_cancelled_from_its_page(watched: Any, server: str, js: bool) -> None:
    page = watched(js).page
    page.goto(server + "/runs/new?path=jax-gpu")
    # The form starts on a B200 compile; with no target the job waits for a real GPU.
    page.select_option("select[name=target]", "")
    if not js:
        page.get_by_role("button", name="Update the form for this target").click()
    # The user's own choice stands, with a warning that it will wait.
    expect(page.locator("#path-note")).to_contain_text("No connected worker runs jax-gpu. A job")
    page.click("#queue-run")
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f]{16}$"))
    url = page.url
    expect(page.locator("#run-badge")).to_have_text("queued")
    page.get_by_role("button", name="Cancel this run").click()
    expect(page.locator("#run-badge")).to_have_text("cancelled", timeout=10000)
    expect(page.locator("#verdict")).to_contain_text("cancelled on request")
    expect(page.get_by_role("button", name="Cancel this run")).to_have_count(0)
    assert page.url == url
    job = loopback.get(url + ".json", timeout=10).json()
    assert job["status"] == "cancelled"


@pytest.fixture(scope="module")
def compared(server: str) -> dict[str, str]:
    """Finished runs to compare: two of one job, and one with another dtype."""
    spec: dict[str, Any] = {
        "workload": "matmul",
        "path": "jax-cpu",
        "params": {"m": 32, "n": 32, "k": 32},
        "measure": {"samples": 5},
    }
    other = {**spec, "params": {**spec["params"], "dtype": "bfloat16"}}
    ids = {"a": submit(server, spec), "b": submit(server, spec)}
    ids["bf16"] = submit(server, other)
    for job_id in ids.values():
        wait_done(server, job_id)
    return ids


@JS
def test_compare_pages_show_one_verdict(
    watched: Any, server: str, compared: dict[str, str], js: bool
) -> None:
    page = watched(js).page
    a, b, bf16 = compared["a"], compared["b"], compared["bf16"]
    page.goto(f"{server}/compare?a={a}&b={b}")
    expect(page.locator(".verdict")).to_have_count(1)
    expect(page.locator("#verdict h2")).to_have_text(re.compile(r"^A/A comparison"))
    expect(page.get_by_text("Like with like")).to_have_count(0)
    page.goto(f"{server}/compare?a={a}&b={bf16}")
    expect(page.locator(".verdict")).to_have_count(1)
    expect(page.locator("#verdict h2")).to_have_text("Not comparable: no ratio is printed")
    for contradiction in ("A/A", "Like with like", "Queue the missing repeats", "Export as"):
        expect(page.get_by_text(contradiction)).to_have_count(0)
    # The picker offers neither the run already on side A nor a nameless device.
    page.goto(f"{server}/compare?a={a}")
    expect(page.locator(".verdict")).to_have_count(0)
    picked = page.locator("table.stats tbody tr")
    expect(picked.filter(has_text=a)).to_have_count(0)
    expect(picked.filter(has_text=b).locator("td").nth(2)).to_have_text("1 × CPU")
    # Without a query, the page says how to start.
    response = page.goto(server + "/compare")
    assert response is not None and response.status == 200
    expect(page.locator(f'a[href="/compare?a={a}"]')).to_be_visible()


@JS
def test_a_bad_price_is_caught_in_the_form(
    watched: Any, server: str, compared: dict[str, str], js: bool
) -> None:
    w = watched(js)
    page = w.page
    here = f"{server}/compare?a={compared['a']}&b={compared['b']}"
    page.goto(here)
    price = page.locator("#d-pa")
    expect(price).to_have_attribute("type", "number")
    if js:
        # The browser checks the number field itself: a negative price is not sent.
        price.fill("-5")
        page.get_by_role("button", name="Export as Markdown").click()
        expect(page.locator("#d-pa:invalid")).to_have_count(1)
        expect(page).to_have_url(here)
    else:
        # What a browser that does not check number fields sends: the server names the
        # field beside it, on the same page, with what was typed kept.
        bad = (
            f"{server}/compare/decision.md?a={compared['a']}&b={compared['b']}"
            "&title=kept&price_a=abc"
        )
        w.expected_status.add(bad)
        page.goto(bad)
        expect(page.locator("#e-d-pa")).to_contain_text("is no number")
        expect(page.locator("#d-title")).to_have_value("kept")
        expect(page.locator("#d-pa")).to_have_attribute("value", "abc")


class _Host(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def other_origin(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A plain static site on another port: an origin that is not Boundary's."""
    handler = lambda *a, **k: _Host(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # a free port, bound
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", tmp_path
    finally:
        server.shutdown()
        server.server_close()


@JS
def test_the_pasted_snippet_resizes_on_another_origin(
    watched: Any, server: str, other_origin: tuple[str, Path], js: bool
) -> None:
    reader = watched(js).page
    reader.goto(server + "/read/jax-tpu/scale")
    reader.locator(".embed-box summary").click()
    snippet = reader.locator("#embed-snippet").input_value()
    # Absolute URLs, whether or not JavaScript ran on the page it was copied from.
    assert f'src="{server}/embed/jax-tpu/scale"' in snippet
    assert f'src="{server}/static/embed-host.js' in snippet
    site, folder = other_origin
    (folder / "docs.html").write_text(
        '<!doctype html><html><head><title>Docs</title><link rel="icon" href="data:,">'
        "</head><body><h1>Our docs</h1>"
        f"{snippet}<p>After the card.</p></body></html>"
    )
    host = watched(True).page
    host.goto(site + "/docs.html")
    frame = host.locator("iframe")
    card = host.frame_locator("iframe").locator(".card")
    expect(card).to_be_visible()
    for _ in range(100):  # polled from here: a CSP may forbid wait_for_function's eval
        if frame.evaluate("f => f.getBoundingClientRect().height") != 900:
            break
        host.wait_for_timeout(100)
    height = frame.evaluate("f => f.getBoundingClientRect().height")
    content = host.frames[1].evaluate(
        "() => Math.ceil(document.documentElement.getBoundingClientRect().height)"
    )
    assert height > 900 and abs(height - content) <= 2, (height, content)
    # An embed queues no work: it has no form and no run panel.
    expect(host.frame_locator("iframe").locator("form")).to_have_count(0)
