"""Pallas on the pages, in Chromium, at 390 and 1280 px, with JavaScript on and off, from
`boundary serve` and its one local CPU worker (which compiles for v6e and NVIDIA targets
without the hardware):

- a reader card's Pallas example, compiled for real from its own button, its claims held;
- a TPU Pallas run: the Kernels panel, the Mosaic IR linked line by line to the kernel
  body, the bundles, and each kernel pass with its diff;
- an H100 Triton run: every kernel's registers and spills, and its SASS;
- a jax-cpu run in interpret mode: checked, and no speed anywhere;
- XLA against Pallas on one target: bundle counts side by side, no ratio.

Nothing on any of these pages scrolls sideways, and axe finds nothing serious.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from checks import VIEWPORTS, axe_faults, overflow, shot
from conftest import wait_for_target
from playwright.sync_api import Page, expect
from seed import complete

from tests import loopback

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

DONE_S = 300
MATMUL = {"m": 512, "n": 512, "k": 512, "dtype": "bfloat16"}


@pytest.fixture(scope="module")
def pallas_server(bench_server: str) -> dict[str, Any]:
    """The session's server, once its local worker compiled the runs these pages show."""
    url = bench_server
    wait_for_target(url, "v6e:1x1")
    jobs = {
        "tpu": _submit(
            url, "matmul", "jax-tpu", "v6e:1x1", {**MATMUL, "kernel": "pallas"}, pipeline=True
        ),
        "tpu-xla": _submit(url, "matmul", "jax-tpu", "v6e:1x1", MATMUL),
        "h100": _submit(url, "matmul", "jax-gpu", "h100:1", {**MATMUL, "kernel": "pallas"}),
        "cpu": _submit(url, "elementwise", "jax-cpu", None, {"n": 1 << 14, "kernel": "pallas"}),
    }
    for job in jobs.values():
        _wait(url, job)
    return {"url": url, **jobs}


def _submit(
    url: str,
    workload: str,
    path: str,
    target: str | None,
    params: dict[str, Any],
    *,
    pipeline: bool = False,
) -> str:
    body: dict[str, Any] = {"workload": workload, "path": path, "params": params}
    if target:
        body.update(target=target, stages=["compile"])
    body["measure"] = {"pipeline": pipeline, "samples": 5}
    r = loopback.post(url + "/api/v1/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _wait(url: str, job: str) -> None:
    deadline = time.monotonic() + DONE_S
    while time.monotonic() < deadline:
        if complete(loopback.get(f"{url}/api/v1/jobs/{job}", timeout=10).json()):
            return  # its dumps too: the page is read down to its machine code
        time.sleep(0.5)
    pytest.fail(f"job {job} did not finish in {DONE_S} s")


def _reads_well(page: Page, name: str, *, axe: bool = True) -> None:
    """At a phone's width and a laptop's: nothing scrolls sideways; a screenshot of each;
    and axe finds nothing serious (left out for the long IR views, whose markup the IR
    view's own browser tests check, and which take axe minutes on a small machine)."""
    js = bool(page.js)  # type: ignore[attr-defined]
    for label, size in VIEWPORTS.items():
        page.set_viewport_size(size)
        if js:  # measured in the page's own script, which a no-JS page does not run
            found = overflow(page)
            assert found["scroll"] <= found["width"], (name, label, found["culprits"])
        shot(page, f"pallas-{name}-{'js' if js else 'nojs'}-{label}")
    if axe and js:
        assert axe_faults(page) == [], name


def test_a_tpu_pallas_run_reads_down_to_its_bundles(
    any_page: Page, pallas_server: dict[str, Any]
) -> None:
    page, url, job = any_page, pallas_server["url"], pallas_server["tpu"]
    page.goto(f"{url}/runs/{job}")
    panel = page.locator("section.kernels")
    expect(panel).to_contain_text("A Pallas kernel: Boundary's own kernel")
    expect(panel).to_contain_text("compiled by Mosaic (TPU)")
    expect(panel).to_contain_text("block_m=512 block_n=512 block_k=512")
    expect(panel.locator("table")).to_contain_text("boundary_matmul")
    expect(panel).to_contain_text("a count of VLIW bundles, not a time")
    _reads_well(page, "tpu-run")
    # The kernel's Mosaic IR, each line linked to the kernel body beside it.
    page.goto(f"{url}/runs/{job}/ir/mosaic")
    expect(page.locator(".ir-text")).to_contain_text("tpu.matmul")
    expect(page.locator(".ir-source h3")).to_contain_text("workers/pallas/matmul.py")
    dot = page.locator(".ir-source .sl", has_text="acc_ref[...] += jnp.dot(").first
    link = dot.locator("a.n")
    expect(link).to_be_visible()
    link.click()
    expect(page.locator(".ir-text .l.sel", has_text="tpu.matmul").first).to_be_visible()
    _reads_well(page, "mosaic", axe=False)
    page.goto(f"{url}/runs/{job}/ir/bundles?q=vmatpush")
    expect(page.locator(".ir-text")).to_contain_text("vmatpush")
    _reads_well(page, "bundles", axe=False)


def test_each_pass_of_the_tpu_kernel_is_a_step_with_its_diff(
    any_page: Page, pallas_server: dict[str, Any]
) -> None:
    page, url, job = any_page, pallas_server["url"], pallas_server["tpu"]
    page.goto(f"{url}/runs/{job}/pipeline")
    page.get_by_role("link", name="boundary_matmul", exact=True).click()
    expect(page.locator("h1")).to_contain_text("Passes of the Pallas kernel")
    expect(page.locator(".pipeline-name").first).to_have_text("mosaic")
    page.get_by_role("link", name=re.compile(r"^post-apply-vector-layout$")).first.click()
    expect(page.locator("#diff-h")).to_contain_text("post-apply-vector-layout")
    expect(page.locator(".pipeline-diff .d-add").first).to_be_visible()
    _reads_well(page, "kernel-pipeline")
    page.get_by_role("link", name="Read the kernel after this step").click()
    expect(page.locator(".ir-source h3")).to_contain_text("workers/pallas/matmul.py")
    _reads_well(page, "kernel-step", axe=False)


def test_a_triton_run_lists_registers_and_spills_and_its_sass(
    any_page: Page, pallas_server: dict[str, Any]
) -> None:
    page, url, job = any_page, pallas_server["url"], pallas_server["h100"]
    page.goto(f"{url}/runs/{job}")
    panel = page.locator("section.kernels")
    expect(panel).to_contain_text("compiled by Triton")
    row = panel.locator("tr", has_text="boundary_matmul")
    expect(row).to_contain_text("sm_90a")
    _reads_well(page, "h100-run")
    row.get_by_role("link", name="boundary_matmul", exact=True).click()
    hit = page.locator(".ir-text .l.hit", has_text="===== kernel boundary_matmul")
    expect(hit).to_have_count(1)  # the kernel's own section of the SASS, found
    hit.locator("a.n").click()  # … and read where it stands
    expect(page.locator(".ir-text")).to_contain_text("HGMMA")


def test_an_interpreted_run_is_checked_and_shows_no_speed(
    any_page: Page, pallas_server: dict[str, Any]
) -> None:
    page, url, job = any_page, pallas_server["url"], pallas_server["cpu"]
    page.goto(f"{url}/runs/{job}")
    warnings = page.locator(".warnings li").first
    expect(warnings).to_have_text("Pallas interpret mode: checked on the CPU, no kernel speed")
    expect(page.locator("#verdict")).to_contain_text("Correct within tolerance")
    expect(page.locator("main")).to_contain_text("Withheld: Pallas interpret mode")
    expect(page.locator("svg.samples")).to_have_count(0)
    expect(page.locator("#rates-h")).to_have_count(0)
    _reads_well(page, "interpret")


def test_xla_against_pallas_on_v6e_shows_bundles_side_by_side(
    any_page: Page, pallas_server: dict[str, Any]
) -> None:
    page, url = any_page, pallas_server["url"]
    page.goto(f"{url}/compare?a={pallas_server['tpu-xla']}&b={pallas_server['tpu']}")
    expect(page.locator("main")).to_contain_text("one variable changed (implementation)")
    expect(page.locator("#result-h")).to_have_text("No execution ratio")
    sides = page.locator(".compiled-side")
    expect(sides.nth(0)).to_contain_text("XLA's own kernels")
    expect(sides.nth(1)).to_contain_text("A Pallas kernel")
    expect(sides.nth(0)).to_contain_text("TPU bundles per kernel")
    bundles = sides.nth(1).locator("table", has_text="MXU ops")  # after its memory table
    expect(bundles).to_contain_text("boundary_matmul")
    expect(page.locator("#decision-form")).to_have_count(0)
    _reads_well(page, "compare")


def test_a_cards_pallas_example_compiles_for_real(
    any_page: Page, pallas_server: dict[str, Any]
) -> None:
    page, url = any_page, pallas_server["url"]
    page.goto(url + "/read/jax-tpu/execute")
    example = page.locator(".card-pallas")
    expect(example).to_contain_text("Where a Pallas kernel enters:")
    expect(example).to_contain_text("kernel=pallas")
    _reads_well(page, "card")
    example.get_by_role("button", name="Compile this for real").click()
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f]+$"), timeout=20_000)
    job = page.url.rsplit("/", 1)[1]
    _wait(url, job)
    page.goto(f"{url}/runs/{job}")
    claims = page.locator("#card-claims")
    expect(claims).to_contain_text("This job is the Pallas example of")
    expect(claims).to_contain_text("4 of 4 claims hold")
    expect(claims.locator("li[data-holds='no']")).to_have_count(0)
