"""The tests' own model on its artifact page, in Chromium, as a user would take it: the
forward pass and the train step compiled for v6e:1x1, v6e:2x4, b200:1 and h100:8 by
ticking targets (JavaScript on: the table fills in by itself), the 8-device step with
the one button "Compile for v6e-8, H100 ×8, B200 ×8" (JavaScript off: the page refreshes
itself), each row fitting with its collectives, its HLO diffed across targets; at
390 and 1280 px, with no sideways scrolling, no console error and no serious axe fault.
The train step's and the 8-device step's rows are held to plain JAX's own peak per device
(`jax.jit(exp.call).lower(...).compile()` on the same target).

Every compile is real (libtpu and the CUDA plugin, without the hardware), done by the
local worker of `boundary serve`.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests import loopback
from tests.browser import checks
from tests.browser.conftest import upload_exported, wait_for_target
from tests.workers.own_exports import TARGETS, assert_peak_as_plain_jax

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

DONE_S = 420


@pytest.fixture(scope="module")
def server(bench_server: str) -> str:
    """The session's `boundary serve` with its local worker, once it compiles for targets.
    No other test uploads the own model's programs to it, so their fit tables hold only
    the compiles asked for here."""
    wait_for_target(bench_server, "h100:8")
    return bench_server


def wait_compiled(page: Page, server: str, sha: str, count: int, js: bool) -> list[dict[str, Any]]:
    """Wait for `count` rows of the fit table to be done, as the page shows them."""
    table = page.locator("#fit-table")
    if js:  # htmx swaps the table in as the compiles finish
        expect(table.locator("tr[data-status='done']")).to_have_count(count, timeout=DONE_S * 1000)
        expect(table).to_have_attribute("data-pending", "false", timeout=10_000)
    else:  # the page refreshes itself (<noscript> meta refresh); read it when it is done
        deadline = time.monotonic() + DONE_S
        while time.monotonic() < deadline:
            rows = loopback.get(f"{server}/artifacts/{sha}.json", timeout=10).json()["fit"]
            if len(rows) == count and all(r["final"] for r in rows):
                break
            time.sleep(1)
        page.reload()
    rows: list[dict[str, Any]] = loopback.get(f"{server}/artifacts/{sha}.json", timeout=10).json()[
        "fit"
    ]
    return rows


def compiled_as_plain_jax(server: str, exported: Any, row: dict[str, Any]) -> None:
    """A fit table's row, by its job's own record: done and fitting, compiled without the
    hardware for the row's target, on a mesh the report names, with a peak per device
    within 10 % of plain JAX's compile of the same artifact for the same target."""
    assert row["status"] == "done" and row["fits"], row
    job = loopback.get(f"{server}/api/v1/jobs/{row['job']}", timeout=30).json()
    assert job["status"] == "done", job["reason"]
    report = job["run"]["target"]
    assert report["deviceless"] and report["id"] == row["target"], report
    assert report["mesh"], report
    assert_peak_as_plain_jax(exported, row["target"], report["memory"]["peak_bytes"])
    assert row["peak_bytes"] == job["run"]["memory_analysis"]["peak_bytes"], row


def looks_right(page: Page, name: str, js: bool = True) -> None:
    """At a phone's and a laptop's width: no sideways scrolling, one style of button, and
    (where the page runs scripts, as axe-core needs) no serious accessibility fault."""
    for viewport, size in checks.VIEWPORTS.items():
        page.set_viewport_size(size)  # type: ignore[arg-type]
        page.wait_for_timeout(200)
        checks.shot(page, f"own-model-{name}-{'js' if js else 'nojs'}-{viewport}")
        if not js:
            width = page.locator("main").bounding_box()
            assert width is not None and width["x"] + width["width"] <= size["width"]
            continue
        sideways = checks.overflow(page)
        assert sideways["scroll"] <= sideways["width"], sideways
        assert checks.axe_faults(page) == []
        assert len(checks.button_styles(page)) == 1


@pytest.mark.parametrize("name", ["forward", "train"])
def test_ticked_targets_compile_and_fill_the_fit_table(
    browser: Browser, server: str, own_exports: dict[str, Any], name: str
) -> None:
    exported = own_exports[name]
    sha = upload_exported(server, exported.artifact.read_bytes())
    context = browser.new_context(viewport=checks.VIEWPORTS["desktop"])  # type: ignore[arg-type]
    page = context.new_page()
    watch = checks.Watch()
    watch.attach(page)
    page.goto(f"{server}/artifacts/{sha}")
    expect(page.locator("table.named-arguments")).to_contain_text("params/blocks/0/attn/key/kernel")
    expect(page.locator("table.named-arguments")).to_contain_text("tokens")
    expect(page.locator(".one-click button")).to_have_text("Compile for v6e-8, H100 ×8, B200 ×8")
    form = page.locator("form.targets-form")
    for box in form.locator("input[name='target']").all():
        box.set_checked(box.get_attribute("value") in TARGETS)
    form.get_by_role("button", name="Compile for the chosen targets").click()
    page.wait_for_url(re.compile(re.escape(f"{server}/artifacts/{sha}?target=") + ".*#fit-h$"))
    rows = wait_compiled(page, server, sha, len(TARGETS), js=True)
    assert [r["target"] for r in rows] == ["v6e:1x1", "v6e:2x4", "b200:1", "h100:8"]
    table = page.locator("#fit-table")
    for row in rows:
        assert row["status"] == "done" and row["fits"], row
        shown = table.locator(f"tr[data-target='{row['target']}']")
        expect(shown).to_contain_text("Fits:")
        expect(shown).to_contain_text(f"{row['peak_bytes']:,}")
        if name == "train":  # (the forward pass's are held to it end to end, from the CLI)
            compiled_as_plain_jax(server, exported, row)
    expect(table.locator("tr[data-target='v6e:2x4']")).to_contain_text(
        "one device of v6e:2x4's 8 (the artifact was exported for one)"
    )
    looks_right(page, name)
    assert watch.console == [] and watch.failed == []
    context.close()


def test_the_one_button_compiles_the_eight_device_step_without_javascript(
    browser: Browser, server: str, own_exports: dict[str, Any]
) -> None:
    sha = upload_exported(server, own_exports["dp"].artifact.read_bytes())
    context = browser.new_context(
        viewport=checks.VIEWPORTS["phone"],  # type: ignore[arg-type]
        java_script_enabled=False,
    )
    page = context.new_page()
    watch = checks.Watch()
    watch.attach(page)
    page.goto(f"{server}/artifacts/{sha}")
    expect(page.locator("main")).to_contain_text("cpu, cuda, tpu, 8 devices")
    expect(page.locator("input[name='target'][value='b200:1']")).to_have_count(0)
    page.get_by_role("button", name="Compile for v6e-8, H100 ×8, B200 ×8").click()
    page.wait_for_url(re.compile(re.escape(f"{server}/artifacts/{sha}?target=") + ".*#fit-h$"))
    expect(page.locator("head meta[http-equiv='refresh']")).to_have_count(1)
    rows = wait_compiled(page, server, sha, 3, js=False)
    assert [r["target"] for r in rows] == ["v6e:2x4", "b200:8", "h100:8"]
    table = page.locator("#fit-table")
    for row in rows:
        shown = table.locator(f"tr[data-target='{row['target']}']")
        expect(shown).to_contain_text("all 8 devices of")
        expect(shown).to_contain_text("Fits:")
        expect(shown).to_contain_text("all-reduce")
        compiled_as_plain_jax(server, own_exports["dp"], row)
    expect(page.locator("head meta[http-equiv='refresh']")).to_have_count(0)
    looks_right(page, "dp", js=False)
    # Each row after the first links to the HLO diffed with the first's.
    table.locator("tr[data-target='h100:8']").get_by_role("link", name="diff with v6e-8").click()
    expect(page.locator("main")).to_contain_text("v6e:2x4")
    expect(page.locator("main")).to_contain_text("h100:8")
    expect(page.locator("main")).to_contain_text("all-reduce")
    expect(page.locator("main")).not_to_contain_text("Not comparable")  # the page's own link
    # A row's run page opens with a table of contents that lands on its memory.
    page.goto(f"{server}/runs/{rows[0]['job']}")
    page.locator("nav.run-nav").get_by_role("link", name="memory").click()
    expect(page).to_have_url(re.compile("#memory-h$"))
    expect(page.locator("#memory-h")).to_be_in_viewport()
    assert watch.console == [] and watch.failed == []
    context.close()
    # The same page with scripts on, as most readers see it.
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server}/artifacts/{sha}")
    expect(page.locator("#fit-table tr[data-status='done']")).to_have_count(3)
    looks_right(page, "dp")
    page.set_viewport_size(checks.VIEWPORTS["phone"])  # type: ignore[arg-type]
    page.goto(f"{server}/runs/{rows[-1]['job']}")
    page.locator("nav.run-nav").get_by_role("link", name="IR").click()
    expect(page.locator("#ir-h")).to_be_in_viewport()
    context.close()


@pytest.fixture(scope="module")
def forward_compiled(browser: Browser, server: str, own_exports: dict[str, Any]) -> str:
    """The forward pass uploaded and compiled for every target from its artifact page's own
    form, as a person does it (or as the test above left it); its SHA-256."""
    sha = upload_exported(server, own_exports["forward"].artifact.read_bytes())
    fit = loopback.get(f"{server}/artifacts/{sha}.json", timeout=10).json()["fit"]
    if len(fit) < len(TARGETS):
        page = browser.new_page(viewport=checks.VIEWPORTS["desktop"])  # type: ignore[arg-type]
        page.goto(f"{server}/artifacts/{sha}")
        form = page.locator("form.targets-form")
        for box in form.locator("input[name='target']").all():
            box.set_checked(box.get_attribute("value") in TARGETS)
        form.get_by_role("button", name="Compile for the chosen targets").click()
        wait_compiled(page, server, sha, len(TARGETS), js=True)
        page.close()
    return sha


def inside(page: Page, selector: str, width: int) -> None:
    """Every element `selector` finds is whole between the window's edges."""
    for element in page.locator(selector).all():
        box = element.bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 1, (selector, box)


@pytest.mark.parametrize("viewport", list(checks.VIEWPORTS))
@pytest.mark.parametrize("js", [True, False], ids=["js", "no-js"])
def test_from_the_fit_table_to_a_comparison_and_through_a_run_pages_sections(
    browser: Browser, server: str, forward_compiled: str, viewport: str, js: bool
) -> None:
    """The artifact page's "Does it fit?" table, read at this width; its row's own diff link,
    which lands on a compile-only comparison (never "Not comparable"); and a row's run
    page, whose navigation bar takes each link to its section."""
    sha, size = forward_compiled, checks.VIEWPORTS[viewport]
    context = browser.new_context(viewport=size, java_script_enabled=js)  # type: ignore[arg-type]
    page = context.new_page()
    watch = checks.Watch()
    watch.attach(page)
    page.goto(f"{server}/artifacts/{sha}")
    table = page.locator("#fit-table")
    expect(table.locator("tr[data-status='done']")).to_have_count(len(TARGETS))
    for target in TARGETS:
        row = table.locator(f"tr[data-target='{target}']")
        expect(row).to_contain_text(target)
        expect(row).to_contain_text("Fits:")
    inside(page, "#fit-table tr[data-status='done'] th a", size["width"])
    inside(page, "main h1", size["width"])
    checks.shot(page, f"own-model-fit-{viewport}-{'js' if js else 'nojs'}")
    # The second row's diff link, as the table offers it.
    row = table.locator(f"tr[data-target='{TARGETS[1]}']")
    link = row.get_by_role("link", name=re.compile("^diff with"))
    href = link.get_attribute("href")
    assert href and loopback.get(server + href, timeout=60).status_code == 200, href
    link.click()
    main = page.locator("main")
    expect(main).to_contain_text("Both sides only compiled")
    expect(main).not_to_contain_text("Not comparable")
    for target in TARGETS[:2]:
        expect(page.locator(".compiled-side h3", has_text=target)).to_be_visible()
    inside(page, ".compiled-side h3, .compiled-side h4, main h1", size["width"])
    expect(page.locator(".compiled-side h4", has_text="Memory per device").first).to_be_visible()
    if js:  # (a page without scripts cannot be asked for its width; its boxes are checked)
        sideways = checks.overflow(page)
        assert sideways["scroll"] <= sideways["width"], sideways
    checks.shot(page, f"own-model-compare-{viewport}-{'js' if js else 'nojs'}")
    # A row's run page: its navigation bar sends each link to its own section.
    page.goto(f"{server}/artifacts/{sha}")
    table.locator(f"tr[data-target='{TARGETS[0]}'] th a").first.click()
    expect(page.locator("h1#run-h")).to_contain_text(TARGETS[0])
    nav = page.locator("nav.run-nav")
    inside(page, "nav.run-nav a", size["width"])
    names = [a.inner_text() for a in nav.get_by_role("link").all()]
    assert {"summary", "memory", "IR", "reproduce"} <= set(names), names
    for name in names:
        link = nav.get_by_role("link", name=name, exact=True)
        anchor = link.get_attribute("href") or ""
        assert anchor.startswith("#"), anchor
        link.click()
        expect(page).to_have_url(re.compile(re.escape(anchor) + "$"))
        expect(page.locator(anchor)).to_be_in_viewport()
    assert watch.console == [] and watch.failed == []
    context.close()
