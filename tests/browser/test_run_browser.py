"""A job submitted through the page, in a real browser, runs on the real local worker and
its IR and samples render; progress arrives without a page reload."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


def test_submit_from_the_page_and_read_the_run(page: Page, bench_server: str) -> None:
    page.goto(bench_server + "/runs/new")
    page.fill("#p-m", "96")
    page.fill("#p-n", "64")
    page.fill("#p-k", "80")
    page.fill("#m-samples", "15")
    page.get_by_role("button", name="Queue the run").click()
    expect(page).to_have_url(
        re.compile(re.escape(bench_server) + r"/runs/[0-9a-f]+$"), timeout=10000
    )
    page.evaluate("window.__marker = 'no reload'")
    # On the run's own page, the worker's progress streams in and the result replaces it,
    # all without a reload.
    expect(page.locator("#run")).to_have_attribute("data-status", "done", timeout=90000)
    assert page.evaluate("window.__marker") == "no reload"
    expect(page.get_by_text("Correct within tolerance")).to_be_visible()
    expect(page.locator(".chart-wide svg.samples")).to_have_count(1)
    expect(page.locator(".chart-wide svg.samples circle.sample")).to_have_count(15)
    expect(page.get_by_text("host-sync").first).to_be_visible()
    # The optimized HLO loads into the IR view; the StableHLO tab swaps it.
    expect(page.locator(".ir-view[data-artifact='hlo'] .ir-lines .l").first).to_be_visible(
        timeout=10000
    )
    page.locator(".tabs a[data-artifact='stablehlo']").click()
    expect(page.locator(".ir-view[data-artifact='stablehlo']")).to_contain_text("dot_general")
    page.fill(".ir-q", "dot_general")
    expect(page.locator(".ir-status")).to_contain_text("matching line")
    expect(page.locator(".ir-lines .l.hit").first).to_be_visible()
    # The reproduce command carries the exact parameters.
    expect(page.locator(".reproduce")).to_contain_text("boundary run matmul m=96 n=64 k=80")


def test_bad_input_in_the_page_is_named_and_kept(page: Page, bench_server: str) -> None:
    page.goto(bench_server + "/runs/new")
    page.fill("#p-m", "0")
    page.fill("#p-k", "lots")
    page.get_by_role("button", name="Queue the run").click()
    expect(page.locator(".error").first).to_be_visible()
    expect(page.locator("#p-k")).to_have_value("lots")
    expect(page.locator("#p-m")).to_have_value("0")
    expect(page).to_have_url(bench_server + "/runs/new")
    # Focus lands on the first bad field, not on <body> or the replaced button.
    expect(page.locator("#p-m")).to_be_focused()


def test_the_reader_carries_a_run_panel(page: Page, bench_server: str) -> None:
    page.goto(bench_server + "/read/jax-gpu/execute")
    form = page.locator("#run-panel form#run-form")
    expect(form).to_be_visible()
    # No GPU worker is connected here, but the local worker compiles for B200s without
    # one: the form starts on that, compile only, and says why.
    expect(page.locator("#f-path option:checked")).to_have_text("jax-gpu (no worker connected)")
    expect(page.locator("#f-target")).to_have_value("b200:1")
    expect(page.locator("#path-note")).to_contain_text("starts on b200:1, compile only")
    # A timed run needs a path a worker executes: jax-cpu clears the target.
    page.select_option("#f-path", "jax-cpu")
    expect(page.locator("#f-path option:checked")).to_have_text("jax-cpu")
    # The form comes back for the new path (htmx swaps it in) without its target field;
    # typing before it came back would type into the old form.
    expect(page.locator("#f-target")).to_have_count(0)
    page.fill("#p-m", "32")
    page.fill("#m-samples", "5")
    page.get_by_role("button", name="Queue the run").click()
    expect(page.locator("#run")).to_have_attribute("data-status", "done", timeout=90000)
