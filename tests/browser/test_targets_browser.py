"""Targets on the pages, in Chromium, from `boundary serve` with its one local CPU worker on
this GPU-less machine, with JavaScript on and off:

- the TPU scale card's "Compile this for real" shows the v6e:2x4 HLO with its all-reduce
  and replica groups, and the card's claims hold in it;
- a CPU vs v6e vs B200 matmul matrix fills in;
- a v6e vs B200 comparison shows the HLO diff and memory per device, and no timing ratio;
- the memory-fit bars are right for a case that fits and for one that does not.

Every compile here is real (libtpu and the CUDA plugin, without the hardware).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for_target
from playwright.sync_api import Page, expect

from tests import loopback

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

RUN_DONE_MS = 180_000
SHOTS = Path("/tmp/boundary-target-shots")


@pytest.fixture(scope="module")
def target_server(bench_server: str) -> str:
    """The session's server with one local worker, once it compiles for targets without
    the hardware."""
    wait_for_target(bench_server, "v6e:2x4")
    return bench_server


def _wait_run_done(page: Page, server: str) -> None:
    """Wait for the job on the API, then read the run page as a reader arriving then would.

    (The live stream's own browser test is tests/browser/test_run_browser.py; here the
    subject is what a finished target run shows, so a stalled stream must not hide it.)
    """
    job = _job_id(page)
    # Leave the pending page first: without JavaScript it reloads itself (a meta refresh),
    # and a reload under way would interrupt the navigation below.
    page.goto("about:blank")
    deadline = time.monotonic() + RUN_DONE_MS / 1000
    while time.monotonic() < deadline:
        status = loopback.get(f"{server}/api/v1/jobs/{job}", timeout=10).json()["status"]
        if status in ("done", "failed", "expired", "cancelled"):
            break
        time.sleep(0.5)
    page.goto(f"{server}/runs/{job}")
    expect(page.locator("#run")).to_have_attribute("data-status", "done")


def _shots(page: Page, name: str, locator: str) -> None:
    """Screenshots at a phone's and a laptop's size, for a person to look at."""
    SHOTS.mkdir(exist_ok=True)
    js = "js" if page.js else "nojs"  # type: ignore[attr-defined]
    for w, h in ((390, 844), (1280, 800)):
        page.set_viewport_size({"width": w, "height": h})
        page.locator(locator).first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"{name}-{js}-{w}.png"))


def _job_id(page: Page) -> str:
    match = re.search(r"/runs/([0-9a-f]+)$", page.url)
    assert match, page.url
    return match.group(1)


def test_tpu_scale_card_compiles_its_own_example_for_v6e_2x4(
    any_page: Page, target_server: str
) -> None:
    page = any_page
    page.goto(target_server + "/read/jax-tpu/scale")
    card = page.locator(".card-job")
    expect(card).to_contain_text("--target v6e:2x4")
    expect(card).to_contain_text("a_spec=data,model")
    _shots(page, "card", ".card-job")
    page.locator("#card-compile").get_by_role("button", name="Compile this for real").click()
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f]+$"), timeout=20_000)
    _wait_run_done(page, target_server)
    claims = page.locator("#card-claims")
    expect(claims).to_contain_text("4 of 4 claims hold")
    expect(claims.locator("li[data-holds='no']")).to_have_count(0)
    expect(claims).to_contain_text("replica_groups={{0,1,2,3},{4,5,6,7}}")
    # The summary of what XLA chose lists the all-reduce with its replica groups.
    collectives = page.locator("section[aria-labelledby='hlo-h']")
    expect(collectives).to_contain_text("all-reduce")
    expect(collectives).to_contain_text("{{0,1,2,3},{4,5,6,7}}")
    expect(page.locator("#target-h")).to_contain_text("v6e:2x4")
    _shots(page, "claims", "#card-claims")
    # The optimized HLO itself (with JavaScript in the IR view; its own page without).
    job = _job_id(page)
    if page.js:  # type: ignore[attr-defined]
        ir = page.locator(".ir-view[data-artifact='hlo']")
        expect(ir).to_contain_text("all-reduce(", timeout=20_000)
    else:
        page.goto(f"{target_server}/runs/{job}/ir/hlo")
        expect(page.locator("main")).to_contain_text("all-reduce(")
    expect(page.locator("main")).to_contain_text("replica_groups={{0,1,2,3},{4,5,6,7}}")
    expect(page.locator("main")).to_contain_text("T(8,128)")


def _matrix(page: Page, server: str, targets: list[str], shape: str) -> dict[str, Any]:
    page.goto(server + "/matrices/new")
    page.fill("#x-axis-values", shape)
    for t in targets:
        page.locator(f"input[name='targets'][value='{t}']").check()
    for p in page.locator("input[name='paths']:checked").all():
        p.uncheck()
    page.get_by_role("button", name="Run the matrix").click()
    expect(page).to_have_url(re.compile(r"/matrices/[0-9a-f]+$"), timeout=20_000)
    expect(page.locator("#matrix-table")).to_have_attribute(
        "data-complete", "true", timeout=RUN_DONE_MS
    )
    data: dict[str, Any] = loopback.get(page.url + ".json", timeout=10).json()
    return data


def test_a_cpu_v6e_b200_matmul_matrix_fills_in(any_page: Page, target_server: str) -> None:
    page = any_page
    data = _matrix(page, target_server, ["cpu", "v6e:1x1", "b200:1"], "m=256, n=256, k=256")
    assert [c["label"] for c in data["columns"]] == [
        "cpu (jax-cpu)",
        "v6e:1x1 (jax-tpu)",
        "b200:1 (jax-gpu)",
    ]
    cells = data["rows"][0]["cells"]
    assert [c["status"] for c in cells] == ["done", "done", "done"]
    assert cells[1]["target"] == "v6e:1x1" and cells[2]["target"] == "b200:1"
    # The same facts per cell: fusions, memory per device against what a device may hold.
    assert all(c["fusions"] for c in cells)
    assert cells[1]["hbm_bytes"] == 32 * 2**30 and cells[2]["hbm_bytes"] == 180 * 10**9
    assert cells[1]["usable_bytes"] < 32 * 2**30 and cells[2]["usable_bytes"] == 135 * 10**9
    table = page.locator("#matrix-table")
    expect(table.locator("td[data-status='done']")).to_have_count(3)
    expect(table).to_contain_text("compile (this host)")
    expect(table).to_contain_text("of 33.6 GB usable")  # libtpu's, on a v6e chip
    expect(table).to_contain_text("of 135 GB usable")  # JAX's 0.75 of a B200's 180 GB
    expect(table).not_to_contain_text("median")
    _shots(page, "matrix", "#matrix-table")
    csv = loopback.get(target_server + data["links"]["csv"], timeout=10).text.splitlines()
    assert "memory_needed_bytes" in csv[0] and len(csv) == 4


def test_v6e_against_b200_shows_the_diff_and_memory_without_a_ratio(
    any_page: Page, target_server: str
) -> None:
    page = any_page
    data = _matrix(page, target_server, ["v6e:1x1", "b200:1"], "m=512, n=256, k=384")
    a, b = (c["job"] for c in data["rows"][0]["cells"])
    page.goto(f"{target_server}/compare?a={a}&b={b}")
    expect(page.locator("#compare-h")).to_be_visible()
    expect(page.locator("main")).to_contain_text("one variable changed (target)")
    expect(page.locator("#result-h")).to_have_text("No execution ratio")
    expect(page.locator("main")).not_to_contain_text("B/A time ratio")
    expect(page.locator("main")).not_to_contain_text("Queue the missing repeats")
    sides = page.locator(".compiled-side")
    expect(sides).to_have_count(2)
    expect(sides.nth(0)).to_contain_text("v6e:1x1")
    expect(sides.nth(1)).to_contain_text("b200:1")
    expect(sides.nth(0)).to_contain_text("Compile time on this host")
    expect(sides.nth(0).locator("svg.memory-bars")).to_have_count(1)
    expect(sides.nth(1).locator("svg.memory-bars")).to_have_count(1)
    expect(sides.nth(1)).to_contain_text("180 GB HBM3E per GPU")
    diff = page.locator("section[aria-labelledby='diff-h']")
    expect(diff).to_contain_text("hlo")
    expect(diff.locator("table.diff")).to_have_count(1)
    expect(diff).to_contain_text("T(8,128)")  # the TPU side's tiled layouts
    expect(diff).to_contain_text("__triton_nested_gemm_fusion")  # the B200 side's GEMM
    _shots(page, "compare", ".compiled-sides")


@pytest.fixture(scope="module")
def fit_jobs() -> dict[bool, str]:
    """The memory-fit cases' jobs, by whether the case fits, once each is submitted."""
    return {}


def _submit(server: str, body: dict[str, Any]) -> str:
    r = loopback.post(server + "/api/v1/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


@pytest.mark.parametrize(
    ("body", "fits"),
    [
        (
            {
                "workload": "matmul",
                "path": "jax-tpu",
                "target": "v6e:1x1",
                "params": {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16"},
            },
            True,
        ),
        (
            # The score matrix alone is 16 × 32 × 8192² float32 = 137 GB, and the softmax
            # keeps more beside it: more than an H100's 80 GB.
            {
                "workload": "attention",
                "path": "jax-gpu",
                "target": "h100:1",
                "params": {"batch": 16, "heads": 32, "seq_len": 8192, "head_dim": 128},
            },
            False,
        ),
    ],
    ids=["fits", "does-not-fit"],
)
def test_memory_fit_bars(
    any_page: Page, target_server: str, fit_jobs: dict[bool, str], body: dict[str, Any], fits: bool
) -> None:
    page = any_page
    if fits not in fit_jobs:  # one compile per case; its page is read with scripts on and off
        fit_jobs[fits] = _submit(target_server, body)
    job = fit_jobs[fits]
    page.goto(f"{target_server}/runs/{job}")
    _wait_run_done(page, target_server)
    run = loopback.get(f"{target_server}/runs/{job}.json", timeout=10).json()["run"]
    memory = run["target"]["memory"]
    needed = memory["peak_bytes"] + (memory["generated_code_bytes"] or 0)
    hbm = memory["usable_bytes"]  # what a device may hold: the line the bars are set against
    assert (needed <= hbm) is fits
    fit = page.locator(".memory-fit")
    expect(fit).to_have_attribute("data-fits", "yes" if fits else "no")
    if fits:
        expect(fit.locator(".fit-verdict")).to_contain_text("Fits:")
    else:
        over = f"{(needed - hbm) / 1e9:.3g} GB"
        expect(fit.locator(".fit-verdict")).to_contain_text(f"Does not fit by {over}")
    expect(fit).to_contain_text(memory["hbm_label"])
    expect(fit).to_contain_text("GiB = 2^30 bytes")
    expect(fit.locator("table.memory-parts")).to_contain_text(f"{memory['argument_bytes']:,}")
    expect(fit.locator("table.memory-parts")).to_contain_text("generated code")
    # The bars: the parts stack to what is needed, and the line sits at the usable bytes.
    svg = fit.locator("svg.memory-bars")
    scale = max(needed, hbm)
    parts = [
        memory[k] or 0
        for k in ("argument_bytes", "output_bytes", "temp_bytes", "generated_code_bytes")
    ]
    widths = [float(r.get_attribute("width") or "nan") for r in svg.locator("rect.mem-part").all()]
    # Each part is drawn at its share of the scale (a part too thin to see gets 0.5 units).
    assert abs(sum(widths) - 640 * sum(parts) / scale) < 0.5 * len(widths) + 0.05
    line_x = float(svg.locator("line.mem-limit").get_attribute("x1") or "nan")
    assert abs(line_x - 640 * hbm / max(needed, hbm)) < 0.01
    assert ("over" in (svg.get_attribute("class") or "")) is (not fits)
    _shots(page, f"fit-{'yes' if fits else 'no'}", ".memory-fit")
