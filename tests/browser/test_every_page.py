"""Every page, on a phone (390x844) and a desktop (1280x800), looked at as a person would:
no sideways scrolling, no console errors or failed requests, no serious or critical
accessibility faults (axe-core), and no text in the pictures smaller than 12 px.

One server (with a run in every state, a comparison and a matrix) and one page per window
size serve the whole module; screenshots go to test-results/browser/.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import checks
from tests.browser.conftest import serve
from tests.browser.seed import WORKER_TOKEN, Site, seed
from workers.agent.runner import CEILINGS_ENV

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A server of its own, not the session's: a GPU worker played on it holds a job
    running until the module ends and a jax-tpu job stays queued, states that would change
    what other tests' jobs and pages meet on a shared server (and theirs its /runs)."""
    # Its local worker measures its ceilings (tests/conftest.py turns that off elsewhere):
    # the profiled run's roofline is drawn against them.
    env = {"BOUNDARY_WORKER_TOKEN": WORKER_TOKEN, CEILINGS_ENV: "1"}
    for url in serve(tmp_path_factory.mktemp("every-page"), workers=1, env=env):
        seeded = seed(url)
        try:
            yield seeded
        finally:
            if seeded.played is not None:
                seeded.played.stop()


@pytest.fixture(scope="module")
def tabs(browser: Browser) -> Iterator[dict[str, tuple[Page, checks.Watch]]]:
    """One page per window size, reused by every visit."""
    opened = {}
    for name, size in checks.VIEWPORTS.items():
        context = browser.new_context(viewport=size)  # type: ignore[arg-type]
        page = context.new_page()
        watch = checks.Watch()
        watch.attach(page)
        opened[name] = (page, watch)
    yield opened
    for page, _ in opened.values():
        page.context.close()


PAGES: dict[str, Callable[[Site], str]] = {
    "reader": lambda s: "/",
    "read-cuda-scale": lambda s: "/read/cuda/scale",
    "read-tpu-execute": lambda s: "/read/jax-tpu/execute",
    "embed": lambda s: "/embed/jax-gpu/compile",
    "guide": lambda s: "/guide",
    "runs": lambda s: "/runs",
    "run-new": lambda s: "/runs/new",
    "workers": lambda s: "/workers",
    "run-done": lambda s: f"/runs/{s.runs['done']}",
    "run-compile-only": lambda s: f"/runs/{s.runs['compile-only']}",
    "run-queued": lambda s: f"/runs/{s.runs['queued']}",
    "run-running": lambda s: f"/runs/{s.runs['running']}",
    "run-failed": lambda s: f"/runs/{s.runs['failed']}",
    "run-ir": lambda s: f"/runs/{s.runs['done']}/ir/stablehlo",
    "run-b200": lambda s: f"/runs/{s.runs['b200']}",
    "run-v6e": lambda s: f"/runs/{s.runs['v6e']}",
    "run-b200-ptx": lambda s: f"/runs/{s.runs['b200']}/ir/ptx",
    "run-pipeline": lambda s: f"/runs/{s.runs['pipeline']}/pipeline",
    "compare": lambda s: s.compare,
    "compare-picker": lambda s: f"/compare?a={s.runs['done']}",
    "compare-targets": lambda s: s.compare_targets,
    "compare-pipelines": lambda s: (
        f"/compare/pipelines?a={s.runs['pipeline']}&b={s.runs['pipeline']}"
    ),
    "artifacts-new": lambda s: "/artifacts/new",
    "matrices": lambda s: "/matrices",
    "matrix-new": lambda s: "/matrices/new",
    "matrix": lambda s: f"/matrices/{s.matrix}",
    "not-found": lambda s: "/runs/no-such-run",
    "bad-query": lambda s: f"/runs/{s.runs['done']}/ir/hlo?start=-5",
    "compiler-options": lambda s: "/compiler-options",
    "run-b200-options": lambda s: f"/runs/{s.runs['b200-options']}",
    "run-b200-reports": lambda s: f"/runs/{s.runs['b200']}/pipeline",
    "run-misfit": lambda s: f"/runs/{s.runs['misfit']}",
    "run-profiled": lambda s: f"/runs/{s.runs['profiled']}",
    "timeline": lambda s: f"/runs/{s.runs['profiled']}/profile/timeline",
    "compare-options": lambda s: s.compare_options,
    "compare-hlo-diff": lambda s: s.compare_targets.replace("/compare?", "/compare/hlo-diff?"),
    "run-ir-search": lambda s: f"/runs/{s.runs['done']}/ir/hlo?q=fusion",
}
DELIBERATE = {"not-found": 404, "bad-query": 422}
"""Pages whose own document answers an error on purpose, by name."""

PICTURED = {"reader", "read-cuda-scale", "read-tpu-execute", "embed", "run-done", "compare"}
"""Pages that must hold a picture (so the font check is not vacuous there)."""


@pytest.mark.parametrize("name", list(PAGES))
@pytest.mark.parametrize("viewport", list(checks.VIEWPORTS))
def test_the_page_reads_well(
    viewport: str, name: str, site: Site, tabs: dict[str, tuple[Page, checks.Watch]]
) -> None:
    page, watch = tabs[viewport]
    # Leave the previous page first: a request it still had in flight (an htmx IR view
    # under load) is aborted by leaving, and must not count against this page.
    page.goto("about:blank")
    watch.clear()
    url = site.url + PAGES[name](site)
    response = page.goto(url, wait_until="load")
    assert response is not None
    assert response.status == DELIBERATE.get(name, 200), url
    page.wait_for_timeout(300)  # htmx's load-time requests (IR view, live stream) settle
    checks.shot(page, f"{name}-{viewport}")
    problems: list[str] = []
    sideways = checks.overflow(page)
    if sideways["scroll"] > sideways["width"]:
        problems.append(f"scrolls sideways: {sideways}")
    tiny = checks.small_text(page)
    if tiny:
        problems.append(f"text under {checks.MIN_FONT_PX} px in pictures: {tiny[:6]}")
    if name in PICTURED and checks.picture_text_count(page) == 0:
        problems.append("no picture text found")
    buttons = checks.button_styles(page)
    if len(buttons) > 1:
        problems.append(f"buttons in {len(buttons)} styles: {buttons}")
    problems += [f"axe: {line}" for line in checks.axe_faults(page)]
    # The browser logs a page's own error status; only that one is expected.
    expected = "Failed to load resource: the server responded with a status of 4"
    problems += [
        f"console: {line}"
        for line in watch.console
        if not (name in DELIBERATE and line.startswith(expected))
    ]
    document_error = f"GET {url}: {DELIBERATE.get(name)}"
    problems += [f"request: {line}" for line in watch.failed if line != document_error]
    assert not problems, "\n".join(problems)


def _active(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = page.evaluate(
        "() => ({id: document.activeElement.id, tag: document.activeElement.tagName,"
        " text: document.activeElement.textContent.trim().slice(0, 60)})"
    )
    return found


def test_focus_follows_a_reader_swap(
    site: Site, tabs: dict[str, tuple[Page, checks.Watch]]
) -> None:
    page, _ = tabs["desktop"]
    page.goto(site.url + "/read/jax-gpu/compile")
    live = page.locator("#reader-status")
    page.locator('a[data-path="jax-tpu"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator("#reader")).to_have_attribute("data-path", "jax-tpu")
    expect(page.locator("#card-title")).to_be_focused()
    expect(live).to_contain_text("TPU")
    # The next Tab goes on into the card, not back to the top of the document.
    page.keyboard.press("Tab")
    assert _active(page)["tag"] != "BODY"
    assert page.evaluate("document.querySelector('#reader').contains(document.activeElement)")
    # A stage, by keyboard alone, the same way.
    page.locator('a[data-stage="scale"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator("#reader")).to_have_attribute("data-stage", "scale")
    expect(page.locator("#card-title")).to_be_focused()
    expect(live).to_contain_text("Scale")


def test_run_ids_keep_their_case(site: Site, tabs: dict[str, tuple[Page, checks.Watch]]) -> None:
    page, _ = tabs["desktop"]
    job_id = site.runs["done"]
    page.goto(f"{site.url}/runs/{job_id}")
    shown = page.locator(".eyebrow .run-id")
    expect(shown).to_have_text(job_id)
    # What the eye reads (and copies) is the id itself, not an uppercased one that 404s.
    assert (
        page.evaluate("getComputedStyle(document.querySelector('.eyebrow .run-id')).textTransform")
        == "none"
    )
    assert shown.evaluate("e => e.innerText") == job_id


# --- what a new user hit (issue 27), each checked where a person sees it ------------------


def _text(page: Page) -> str:
    shown: str = page.locator("main").inner_text()
    return shown


def _inside(page: Page, selector: str) -> list[bool]:
    """For each visible match of `selector`: whether it lies within the window's width."""
    found: list[bool] = page.evaluate(
        """(sel) => [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length)
          .map(e => { const r = e.getBoundingClientRect();
                      return r.left >= 0 && r.right <= document.documentElement.clientWidth; })""",
        selector,
    )
    return found


def _target_comparison_has_no_decision_record(page: Page, site: Site) -> None:
    page.goto(site.url + site.compare_targets)
    assert "decision record" not in _text(page)
    assert "no timing boundary is compared" in _text(page)
    assert "boundary None" not in _text(page)
    answer = page.request.get(
        site.url + site.compare_targets.replace("/compare?", "/compare/decision.json?")
    )
    assert answer.status == 422  # it was a 500 (KeyError 'target')


def _gpu_run_shows_its_launch_order(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/{site.runs['b200']}/pipeline")
    expect(page.get_by_role("heading", level=1)).to_contain_text(
        "Fusion decisions and launch order"
    )
    rows = page.locator("table.thunks tbody tr")
    expect(rows.first).to_contain_text("kernel")
    assert rows.count() >= 1 and re.search(r"\d+ × 1 × 1", rows.first.inner_text())
    assert "Where did this come from" not in _text(page)
    page.goto(f"{site.url}/runs/{site.runs['b200']}")
    expect(
        page.get_by_role("link", name=re.compile("fusion decisions and launch order"))
    ).to_be_visible()
    expect(page.get_by_role("heading", name="Environment of the compiling host")).to_be_visible()


def _options_are_the_one_variable(page: Page, site: Site) -> None:
    page.goto(site.url + site.compare_options)
    expect(page.locator("#guard-h")).to_have_text(
        "Like with like: one variable changed (compiler options: xla_gpu_enable_triton_gemm=false)"
    )
    expect(page.locator("#diff-h")).to_contain_text("hlo")
    page.goto(f"{site.url}/runs")
    expect(page.locator("table.runs")).to_contain_text("xla_gpu_enable_triton_gemm=false")


def _a_tpu_misfit_is_a_finished_run(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/{site.runs['misfit']}")
    expect(page.locator("#run-badge")).to_have_text("done")
    expect(page.locator(".fit-verdict")).to_contain_text("Does not fit by at least")
    label = page.locator("svg.memory-bars text.mem-label").bounding_box()
    line = page.locator("svg.memory-bars line.mem-limit").bounding_box()
    assert label is not None and line is not None
    # The HBM label sits at its line (it sat mid-axis, under the bars, away from it).
    assert min(abs(label["x"] - line["x"]), abs(label["x"] + label["width"] - line["x"])) < 12


def _bad_query_values_get_a_site_page(page: Page, site: Site) -> None:
    answer = page.goto(f"{site.url}/runs/{site.runs['done']}/pipeline?step=abc")
    assert answer is not None and answer.status == 422
    expect(page.get_by_role("heading", level=1)).to_have_text("Not a value this page takes")
    expect(page.locator("main")).to_contain_text("step must be a whole number")


def _workers_list_their_targets(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/workers")
    for target in ("v6e:1x1", "v6e:16x16", "b200:8", "h100:1", "h200:4"):
        expect(page.locator("tr", has_text="local-1").locator("td.targets")).to_contain_text(target)


def _the_tpu_form_says_which_workloads_take_a_slice(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/new?workload=matmul&path=jax-tpu")
    expect(page.locator("#wider-targets")).to_contain_text("sharded-matmul, collective")


def _the_matrix_form_follows_its_workload(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/matrices/new")
    page.locator("#x-workload").select_option("attention")
    expect(page.locator("#x-axis-name")).to_have_value("seq_len")
    expect(page.locator("#x-axis-values")).to_have_value("128, 256")


def _an_emptied_box_is_refused(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/new?workload=matmul&path=jax-cpu")
    page.locator("#p-m").fill("")
    page.locator("#queue-run").click()
    expect(page.locator("#e-m")).to_have_text("m is required; the default is 512")


def _search_marks_the_term(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/{site.runs['done']}/ir/hlo?q=fusion")
    expect(page.locator(".ir-view mark").first).to_have_text(re.compile("fusion", re.I))


def _the_pass_list_shows_changed_steps_only(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/{site.runs['pipeline']}/pipeline")
    unchanged = page.locator(".passes li.unchanged")
    assert unchanged.first.is_visible()
    page.get_by_label("Changed steps only").check()
    expect(unchanged.first).to_be_hidden()
    expect(page.locator(".passes li.changed").first).to_be_visible()


def _the_run_says_why_sampling_stopped_in_words(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/{site.runs['done']}")
    expect(page.locator("main")).to_contain_text("Sampling stopped: took the 12 samples asked for")


def _the_landing_page_offers_the_tour(page: Page, site: Site) -> None:
    page.goto(site.url + "/")
    expect(page.get_by_role("button", name="Compile for a TPU v6e:2x4 slice")).to_be_visible()
    expect(page.get_by_role("button", name="Compare it with 8 H100s")).to_be_visible()
    page.locator(".embed-box summary").click()
    expect(page.get_by_role("button", name="Copy the snippet")).to_be_visible()


def _the_source_pane_is_half_the_view_and_wraps(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/runs/{site.runs['done']}/ir/hlo")
    source = page.locator(".ir-source")
    expect(source).to_be_visible()
    pane, whole = source.bounding_box(), page.locator(".ir-panes").bounding_box()
    assert pane is not None and whole is not None
    assert pane["width"] >= 0.45 * whole["width"], (pane, whole)  # it was 2 parts in 5
    page.get_by_label("Wrap long lines").check()
    code = page.locator(".ir-source .sl code").first
    assert code.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
    scroll = page.locator(".ir-source .ir-scroll")
    assert scroll.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), "the source does not wrap"


FIXED: dict[str, Callable[[Page, Site], None]] = {
    "source-pane": _the_source_pane_is_half_the_view_and_wraps,
    "decision-record": _target_comparison_has_no_decision_record,
    "launch-order": _gpu_run_shows_its_launch_order,
    "options-compared": _options_are_the_one_variable,
    "tpu-misfit": _a_tpu_misfit_is_a_finished_run,
    "bad-query": _bad_query_values_get_a_site_page,
    "workers-targets": _workers_list_their_targets,
    "tpu-form": _the_tpu_form_says_which_workloads_take_a_slice,
    "matrix-form": _the_matrix_form_follows_its_workload,
    "emptied-box": _an_emptied_box_is_refused,
    "search-mark": _search_marks_the_term,
    "changed-only": _the_pass_list_shows_changed_steps_only,
    "stopped-because": _the_run_says_why_sampling_stopped_in_words,
    "landing-tour": _the_landing_page_offers_the_tour,
}


@pytest.mark.parametrize("name", list(FIXED))
def test_what_a_new_user_hit_is_fixed(
    name: str, site: Site, tabs: dict[str, tuple[Page, checks.Watch]]
) -> None:
    page, _ = tabs["desktop"]
    FIXED[name](page, site)


def test_a_phone_sees_whole_charts_and_the_matrix_explained(
    site: Site, tabs: dict[str, tuple[Page, checks.Watch]]
) -> None:
    page, _ = tabs["phone"]
    page.goto(f"{site.url}/runs/{site.runs['profiled']}")
    samples = _inside(page, "svg.samples circle.sample")
    assert len(samples) == 20 and all(samples), samples  # every sample, not 8 of 20
    assert _inside(page, "svg.roofline circle.point") == [True]
    assert all(_inside(page, "svg.roofline polyline.roof"))
    assert all(_inside(page, "svg.roofline text.caption"))
    page.goto(f"{site.url}/matrices/{site.matrix}")
    assert all(_inside(page, ".matrix-caption")), "the matrix's explanation is cut off"
