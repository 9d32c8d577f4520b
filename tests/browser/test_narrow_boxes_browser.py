"""What a newcomer found cut off or missing, in Chromium at a phone's 390×844 and a laptop's
1280×800: the memory fit's HBM line and its label inside the chart's visible box (on the
run page and in each column of a comparison), a run refused on an artifact's page
said at the top of the page, with JavaScript on and off; a comparison's figures each on
one line and its IR diff ~40 characters a side; an artifact's sha256 and shapes whole at
390; the targets ticked before "Compile for the chosen targets" still ticked after it.

The compiles are real (libtpu and the CUDA plugin, without the hardware), done by the
local worker of `boundary serve`.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests import loopback
from tests.browser import checks
from tests.browser.conftest import upload_exported, wait_for_target

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}
SMALL = {"m": 256, "n": 256, "k": 256}


@pytest.fixture(scope="module")
def server(bench_server: str) -> str:
    """The session's `boundary serve` with its local worker, once it compiles for targets."""
    wait_for_target(bench_server, "h100:1")
    return bench_server


def _done(server: str, body: dict[str, Any]) -> str:
    r = loopback.post(server + "/api/v1/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text
    job = str(r.json()["id"])
    deadline = time.monotonic() + 240
    status = "queued"
    while status in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
        status = loopback.get(f"{server}/api/v1/jobs/{job}", timeout=10).json()["status"]
    assert status == "done", status
    return job


@pytest.fixture(scope="module")
def compiled(server: str) -> tuple[str, str]:
    """Two finished compiles of one matmul: for one v6e chip and for one H100."""
    tpu = _done(
        server, {"workload": "matmul", "path": "jax-tpu", "target": "v6e:1x1", "params": SMALL}
    )
    gpu = _done(
        server, {"workload": "matmul", "path": "jax-gpu", "target": "h100:1", "params": SMALL}
    )
    return tpu, gpu


def _inside(inner: Locator, outer: Locator, page: Page) -> None:
    """`inner` is drawn wholly inside `outer`'s box and the window's width."""
    a, b = inner.bounding_box(), outer.bounding_box()
    assert a is not None and b is not None
    right = min(b["x"] + b["width"], page.viewport_size["width"] if page.viewport_size else 1e9)
    assert a["x"] >= b["x"] - 0.5 and a["x"] + a["width"] <= right + 0.5, (a, b)


def _fit_is_whole(fit: Locator, page: Page, usable: str) -> None:
    chart = fit.locator(".chart")
    label = fit.locator("text.mem-label")
    expect(label).to_have_text(f"usable {usable}")
    _inside(label, chart, page)
    _inside(fit.locator("line.mem-limit"), chart, page)
    # The chart's own box has nothing hidden to scroll to.
    hidden = chart.evaluate("c => c.scrollWidth - c.clientWidth")
    assert hidden <= 1, hidden


def test_the_hbm_line_and_its_label_fit_the_chart_on_a_phone_and_in_a_comparison(
    page: Page, server: str, compiled: tuple[str, str]
) -> None:
    tpu, gpu = compiled
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/runs/{tpu}")
    fit = page.locator(".memory-fit")
    fit.scroll_into_view_if_needed()
    _fit_is_whole(fit, page, "33.6 GB")  # libtpu's usable bytes on a v6e chip
    assert checks.overflow(page)["scroll"] <= PHONE["width"]
    checks.OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(checks.OUTPUT / "narrow-fit-run-390.png"))
    page.set_viewport_size(LAPTOP)
    page.goto(f"{server}/compare?a={tpu}&b={gpu}")
    sides = page.locator(".compiled-side")
    expect(sides).to_have_count(2)
    for side, usable in zip(sides.all(), ("33.6 GB", "60 GB"), strict=True):
        _fit_is_whole(side.locator(".memory-fit"), page, usable)
    sides.first.locator(".memory-fit").scroll_into_view_if_needed()
    page.screenshot(path=str(checks.OUTPUT / "narrow-fit-compare-1280.png"))


def _forward(x: Any, w: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(x @ w)


def _uploaded(server: str, platforms: list[str]) -> str:
    """`_forward` exported for `platforms` and uploaded as `boundary export-fn` would."""
    from workers.cli.export_fn import export_function

    data, _ = export_function(_forward, [("float32", (8, 16)), ("float32", (16, 4))], platforms)
    return upload_exported(server, data)


@pytest.fixture(scope="module")
def artifact(server: str) -> str:
    """An exported function for the CPU."""
    return _uploaded(server, ["cpu"])


def test_a_refused_run_on_the_artifact_page_says_so_at_the_top(
    any_page: Page, server: str, artifact: str
) -> None:
    page = any_page
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/artifacts/{artifact}")
    page.fill("#r-rules", '{"x": {"kind": "normal"')  # not JSON: cut short
    with page.expect_navigation():
        page.get_by_role("button", name="Run", exact=True).click()
    # The page comes back at its top: what went wrong is there, in the first screen.
    alert = page.locator("#refused")
    expect(alert).to_have_attribute("role", "alert")
    expect(alert).to_contain_text("Not queued: the server refused this run.")
    expect(alert).to_be_in_viewport()
    box = alert.bounding_box()
    assert box is not None and box["y"] + box["height"] <= PHONE["height"], box
    checks.OUTPUT.mkdir(parents=True, exist_ok=True)
    js = "js" if page.js else "nojs"  # type: ignore[attr-defined]
    page.screenshot(path=str(checks.OUTPUT / f"narrow-refused-390{js}.png"))
    # Its link leads to the field, where the same message stands.
    link = alert.get_by_role("link", name="not JSON")
    expect(link).to_have_attribute("href", "#r-rules")
    link.click()
    expect(page.locator("#r-rules")).to_be_in_viewport()
    expect(page.locator(".field.wide .error")).to_contain_text("not JSON")


# Every command-line word ("--example", "export-fn") inside the page's <code>, and how many
# lines each is drawn on.
_WORD_LINES = """() => {
  const out = [];
  for (const code of document.querySelectorAll('main code')) {
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/\\S*-\\S*/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        out.push([m[0], tops.size]);
      }
    }
  }
  return out;
}"""


def test_the_upload_pages_flags_never_break_inside_at_390(page: Page, server: str) -> None:
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/artifacts/new")
    words = page.evaluate(_WORD_LINES)
    assert ["--example", 1] in words, words
    broken = [w for w, lines in words if lines != 1]
    assert broken == [], broken
    assert checks.overflow(page)["scroll"] <= PHONE["width"]
    checks.OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(checks.OUTPUT / "narrow-upload-390.png"))


# How many lines each text of the memory table's figures is drawn on ("0.00235 %",
# "33.6 MB", "33,554,432"): a figure split over two lines reads as two.
_FIGURE_LINES = """(table) => {
  const out = [];
  for (const td of table.querySelectorAll('td')) {
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.data.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      out.push([node.data.trim(), tops.size]);
    }
  }
  return out;
}"""

# The width of each side's text column of the IR diff, in characters of its own font.
_DIFF_COLUMNS = """(table) => {
  const probe = document.createElement('span');
  probe.textContent = '0'.repeat(50);
  table.querySelector('td.l').appendChild(probe);
  const char = probe.getBoundingClientRect().width / 50;
  probe.remove();
  const row = table.querySelector('tr[class^="d-"]');
  const pad = td => {
    const s = getComputedStyle(td);
    return parseFloat(s.paddingLeft) + parseFloat(s.paddingRight);
  };
  return [...row.querySelectorAll('td.l, td.r')].map(td => (td.clientWidth - pad(td)) / char);
}"""


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["390", "1280"])
def test_a_comparisons_figures_stay_whole_and_its_diff_is_readable(
    page: Page, server: str, compiled: tuple[str, str], size: dict[str, int]
) -> None:
    tpu, gpu = compiled
    page.set_viewport_size(size)  # type: ignore[arg-type]
    page.goto(f"{server}/compare?a={tpu}&b={gpu}")
    tables = page.locator("table.memory-parts")
    expect(tables).to_have_count(2)
    for table in tables.all():
        figures = table.evaluate(_FIGURE_LINES)
        assert any(text.endswith("%") for text, _ in figures), figures
        # A figure is never split over two lines; words in its place ("not reported by
        # libtpu without the device") may wrap.
        broken = [text for text, lines in figures if lines != 1 and "not reported" not in text]
        assert broken == [], broken
        names = table.evaluate(_FIGURE_LINES.replace("'td'", "'th[scope=row]'"))
        broken = [text for text, lines in names if " " not in text and lines != 1]
        assert broken == [], broken  # "temporaries", never "temporarie" and "s"
    diff = page.locator("table.diff")
    columns = diff.evaluate(_DIFF_COLUMNS)
    assert len(columns) == 2 and min(columns) >= 40, columns
    # The diff scrolls inside its own box; the page itself never scrolls sideways.
    sideways = checks.overflow(page)
    assert sideways["scroll"] <= size["width"], sideways
    box = page.locator(".diff-scroll").bounding_box()
    assert box is not None and box["x"] + box["width"] <= size["width"], box
    checks.OUTPUT.mkdir(parents=True, exist_ok=True)
    for n, table in enumerate(tables.all()):
        table.scroll_into_view_if_needed()
        page.screenshot(path=str(checks.OUTPUT / f"narrow-compare-{size['width']}-mem{n}.png"))
    diff.scroll_into_view_if_needed()
    page.screenshot(path=str(checks.OUTPUT / f"narrow-compare-{size['width']}-diff.png"))


def test_the_artifact_pages_sha256_and_shapes_show_whole_at_390(
    page: Page, server: str, artifact: str
) -> None:
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/artifacts/{artifact}")
    sha = page.locator("section[aria-labelledby='what-h'] table.stats code").first
    expect(sha).to_have_text(artifact)
    boxes = page.locator("section[aria-labelledby='what-h'] .scroll-x")
    assert boxes.count() >= 2
    for box in boxes.all():  # nothing hidden to scroll to: every character in sight
        hidden = box.evaluate("b => b.scrollWidth - b.clientWidth")
        assert hidden <= 1, (box.inner_text(), hidden)
    for code in page.locator("section[aria-labelledby='what-h'] table code").all():
        _inside(code, page.locator("section[aria-labelledby='what-h']"), page)
    assert checks.overflow(page)["scroll"] <= PHONE["width"]
    checks.OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(checks.OUTPUT / "narrow-artifact-declares-390.png"))


@pytest.fixture(scope="module")
def everywhere(server: str) -> str:
    """A function exported for the CPU, CUDA and TPU: every target accepts it."""
    return _uploaded(server, ["cpu", "cuda", "tpu"])


def test_the_chosen_targets_stay_ticked_after_compiling(
    any_page: Page, server: str, everywhere: str
) -> None:
    page = any_page
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/artifacts/{everywhere}")
    form = page.locator("form.targets-form")
    chosen = {"v6e:2x2", "h200:1"} if page.js else {"v6e:1x1", "b200:2"}  # type: ignore[attr-defined]
    for box in form.locator("input[name='target']").all():
        box.set_checked(box.get_attribute("value") in chosen)
    form.get_by_role("button", name="Compile for the chosen targets").click()
    page.wait_for_url(re.compile(r".*#fit-h$"))
    boxes = page.locator("form.targets-form input[name='target']")
    expect(boxes.first).to_be_attached()
    ticked = {b.get_attribute("value") for b in boxes.all() if b.is_checked()}
    assert ticked == chosen
    for target in chosen:
        expect(page.locator(f"#fit-table tr[data-target='{target}']")).to_have_count(1)
    expect(page.locator("main")).not_to_contain_text("It fits")
