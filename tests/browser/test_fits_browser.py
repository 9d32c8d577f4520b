"""A fit search in Chromium, from `boundary serve` with its one local CPU worker, at 390
and 1280 px, with JavaScript on and off: from the catalog's run form to the search's
form, its live progress (probes done, the bracket) and its answer, read whole from the
table, the chart and the probes' runs. Every probe is a real compile for h100:1 without
the hardware (a gather whose table grows with `rows`: about a second each)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from checks import axe_faults, overflow, shot
from conftest import wait_for_target
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

from tests import loopback

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

DONE_S = 180.0
WIDTHS = {"phone": 390, "desktop": 1280}


@pytest.fixture(scope="module")
def gpu_server(bench_server: str) -> str:
    """The session's server, once its local worker compiles for h100:1."""
    wait_for_target(bench_server, "h100:1")
    return bench_server


def _fill_form(page: Page) -> None:
    """The search's form, as a person fills it: gather's rows, h100:1 alone."""
    expect(page.locator("#t-dimension")).to_have_value("rows")
    page.fill("#t-params", "width=4096 count=1024")
    page.fill("#t-lo", "1")
    page.fill("#t-hi", "16777216")
    for target in ("v6e:1x1", "b200:1"):
        page.locator(f'input[name="targets"][value="{target}"]').uncheck()
    page.locator('input[name="targets"][value="h100:1"]').check()
    page.get_by_role("button", name="Find what fits").click()


def _until_done(page: Page) -> list[str]:
    """Wait for the search to end on the page itself (htmx swaps its live part in with
    JavaScript; without, the page refreshes itself every 3 s); what its status said."""
    seen: list[str] = []
    deadline = time.monotonic() + DONE_S
    while time.monotonic() < deadline:
        try:
            status = page.locator("#fit-live").get_attribute("data-status", timeout=5000)
            seen.append(page.locator("#fit-live [role=status]").inner_text(timeout=5000))
        except PlaywrightError:  # a refresh under way (no JavaScript): look again
            status = None
        if status in ("done", "failed", "cancelled"):
            return seen
        page.wait_for_timeout(500)
    pytest.fail(f"the search did not end in {DONE_S:.0f} s: {seen[-3:]}")


@pytest.mark.parametrize("width", list(WIDTHS.values()), ids=list(WIDTHS))
def test_a_search_from_the_catalog_to_its_proved_answer(
    any_page: Page, gpu_server: str, width: int
) -> None:
    page = any_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{gpu_server}/runs/new?workload=gather")
    page.get_by_role("link", name="What size fits a TPU or a GPU?").click()
    expect(page).to_have_url(re.compile(r"/fits/new\?workload=gather$"))
    _fill_form(page)
    expect(page).to_have_url(re.compile(r"/fits/[0-9a-f]{16}$"))
    assert overflow(page)["scroll"] <= page.viewport_size["width"]  # type: ignore[index]
    seen = _until_done(page)
    assert any("Search" in s for s in seen), seen

    fit_id = page.url.rsplit("/", 1)[1]
    api: dict[str, Any] = loopback.get(f"{gpu_server}/api/v1/fits/{fit_id}", timeout=10).json()
    (target,) = api["targets"]
    largest, usable = target["largest_fitting"], target["usable_bytes"]
    assert target["status"] == "found" and not target["largest_is_hi"]
    assert target["peak_bytes_at_largest"] <= usable < target["peak_bytes_above"]
    assert len(target["probes"]) - target["checks_done"] <= 5 and not target["non_monotone"]

    row = page.locator('tr[data-target="h100:1"]')
    expect(row.locator("td.largest")).to_have_text(f"{largest:,}")
    expect(row).to_contain_text(f"{largest + 1:,}: ")
    expect(row).to_contain_text("0.75 × 80 GB HBM3 = 60,000,000,000 bytes")
    searched = len(target["probes"]) - target["checks_done"]
    expect(row.locator("td.progress")).to_contain_text(f"{searched} compiles")
    points = page.locator("svg.fit-chart circle.probe[data-value]")
    expect(points).to_have_count(len(target["probes"]))
    expect(page.locator("svg.fit-chart line.limit.hbm")).to_have_count(1)
    assert overflow(page)["scroll"] <= page.viewport_size["width"]  # type: ignore[index]
    shot(page, f"fit-{'js' if page.js else 'nojs'}-{width}")  # type: ignore[attr-defined]
    if page.js:  # type: ignore[attr-defined]  # (axe runs as a script in the page)
        assert axe_faults(page) == []

    for cell, run in (("td.largest a", "run_at_largest"), ("td.above a", "run_above")):
        href = page.locator(f'tr[data-target="h100:1"] {cell}').get_attribute("href")
        assert href == f"/runs/{target[run]}"  # the proof: each compile's own run
        job = loopback.get(f"{gpu_server}/api/v1/jobs/{target[run]}", timeout=30).json()
        assert job["status"] == "done" and job["run"]["job"]["dumps"] == "none"
    json_twin = loopback.get(f"{gpu_server}/fits/{fit_id}.json", timeout=10)
    assert (
        json_twin.status_code == 200
        and json_twin.json()["targets"][0]["largest_fitting"] == largest
    )
