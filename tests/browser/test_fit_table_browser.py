"""The artifact page's "Does it fit?" table with a fit search's probes present, in
Chromium at 390 and 1280 px, JavaScript on and off: a function with a symbolic batch is
compiled at b=512 for h100:1 and b200:1 from its page, then searched over b for h100:1
(every probe a real compile without the hardware, newer than the two); the table still
compares the two compiles at b=512, names that value on the table and on each row, and
keeps the probes apart in a line that counts them and links their search. No sideways
scrolling, no console error, no serious axe fault."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests import loopback
from tests.browser import checks
from tests.browser.conftest import upload_exported, wait_for_target

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

DONE_S = 240.0
TARGETS = ("h100:1", "b200:1")


def _exported() -> bytes:
    """A two-layer forward with a symbolic batch `b`, of its own (no other test uploads it,
    so its table holds only what this module asks for)."""
    import jax
    import jax.numpy as jnp

    (b,) = jax.export.symbolic_shape("b")

    def forward(x: Any, w1: Any, w2: Any) -> Any:
        return jax.nn.relu(x @ w1) @ w2

    args = (
        jax.ShapeDtypeStruct((b, 32), jnp.float32),
        jax.ShapeDtypeStruct((32, 64), jnp.float32),
        jax.ShapeDtypeStruct((64, 8), jnp.float32),
    )
    exported = jax.export.export(jax.jit(forward), platforms=("cpu", "cuda", "tpu"))(*args)
    return bytes(exported.serialize())


def _until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + DONE_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen in {DONE_S:.0f} s")


@pytest.fixture(scope="module")
def searched(browser: Browser, bench_server: str) -> dict[str, Any]:
    """The artifact compiled at b=512 for both targets from its page (the form, as a
    person fills it), then a fit search over b for h100:1; both done."""
    for target in TARGETS:
        wait_for_target(bench_server, target)
    sha = upload_exported(bench_server, _exported())
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{bench_server}/artifacts/{sha}")
    form = page.locator("form.targets-form")
    for box in form.locator("input[name='target']").all():
        box.set_checked(box.get_attribute("value") in TARGETS)
    form.locator("input[name='dim.b']").fill("512")
    form.get_by_role("button", name="Compile for the chosen targets").click()
    page.wait_for_url(re.compile(r".*#fit-h$"))
    context.close()

    def compiled() -> bool:
        rows = loopback.get(f"{bench_server}/artifacts/{sha}.json", timeout=10).json()["fit"]
        return len(rows) == 2 and all(r["status"] == "done" for r in rows)

    _until(compiled, "the compiles at b=512")
    search = {"artifact": sha, "dimension": "b", "range": [1, 2**20], "targets": ["h100:1"]}
    created = loopback.post(f"{bench_server}/api/v1/fits", json=search, timeout=30)
    assert created.status_code == 202, created.text
    fit_id = created.json()["id"]

    def ended() -> dict[str, Any] | None:
        address = f"{bench_server}/api/v1/fits/{fit_id}"
        fit: dict[str, Any] = loopback.get(address, timeout=10).json()
        return fit if fit["status"] not in ("queued", "running") else None

    fit = _until(ended, "the fit search")
    assert fit["status"] == "done", fit
    return {"sha": sha, "fit": fit}


@pytest.mark.parametrize("width", list(checks.VIEWPORTS), ids=list(checks.VIEWPORTS))
def test_the_table_compares_like_with_like_with_probes_kept_apart(
    browser: Browser, bench_server: str, searched: dict[str, Any], width: str
) -> None:
    sha, fit = searched["sha"], searched["fit"]
    probes = fit["targets"][0]["probes"]
    assert len(probes) >= 3  # the seeds and at least the top of the range
    for js in (True, False):
        context = browser.new_context(
            viewport=checks.VIEWPORTS[width],  # type: ignore[arg-type]
            java_script_enabled=js,
        )
        page = context.new_page()
        watch = checks.Watch()
        watch.attach(page)
        page.goto(f"{bench_server}/artifacts/{sha}")
        _reads_as_compared(page, fit, probes)
        assert checks.overflow(page)["scroll"] <= checks.VIEWPORTS[width]["width"]
        checks.shot(page, f"fit-table-{width}-{'js' if js else 'nojs'}")
        if js:
            assert checks.axe_faults(page) == []
        assert watch.console == [] and watch.failed == []
        # The probes' line leads to their search.
        page.locator(".fit-probes-apart").get_by_role("link").click()
        expect(page).to_have_url(f"{bench_server}/fits/{fit['id']}")
        expect(page.locator("h1")).to_contain_text("the largest b")
        context.close()


def _reads_as_compared(page: Page, fit: dict[str, Any], probes: list[dict[str, Any]]) -> None:
    table = page.locator("#fit-table")
    expect(table.locator("caption")).to_contain_text("every row at b=512")
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(2)
    for target in TARGETS:
        row = table.locator(f"tr[data-target='{target}']")
        expect(row).to_contain_text("compiled with b=512")
        expect(row).to_contain_text("Fits:")
    runs = {p["run_id"] for p in probes}
    for link in table.locator("tbody tr th a").all():
        assert (link.get_attribute("href") or "").rsplit("/", 1)[-1] not in runs
    apart = page.locator(".fit-probes-apart")
    expect(apart).to_contain_text(f"({len(probes)} compiles, b from ")
    expect(apart.get_by_role("link")).to_have_attribute("href", f"/fits/{fit['id']}")
