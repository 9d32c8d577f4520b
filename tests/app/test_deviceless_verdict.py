"""A run compiled without the hardware says that nothing was executed once, at the top of
its page, in its verdict: not again in its warnings, its target panel or its environment.
Its title and heading name the workload and the target. From a real libtpu compile for
v6e:1x1 (a small matmul), posted by a played worker."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from app.web.templating import DEVICELESS, beyond_verdict, chip_name
from tests.app.ir_runs import post_run

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOB = {
    "workload": "matmul",
    "path": "jax-tpu",
    "target": "v6e:1x1",
    "params": {"m": 128, "n": 128, "k": 128},
    "stages": ["compile"],
}

SAYS_NOTHING_RAN = re.compile(r"nothing (was )?(executed|ran|run)|not executed|no time, no speed")


@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    return run_job(JobSpec.model_validate(JOB)).model_dump(mode="json")


def text(html: str) -> str:
    """What a person reads: inline tags run into their words, others break them apart."""
    inline = re.sub(r"</?(strong|code|em|a|span)\b[^>]*>", "", html)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", inline))).strip()


async def test_nothing_executed_is_said_once_in_the_verdict_at_the_top(
    bench_client: httpx.AsyncClient, compiled: dict[str, Any]
) -> None:
    assert compiled["target"]["deviceless"] and compiled["warnings"][0].startswith(DEVICELESS)
    job_id = await post_run(bench_client, compiled)
    html = (await bench_client.get(f"/runs/{job_id}")).text
    title = text(re.search(r"<title>(.*?)</title>", html, re.S).group(1))  # type: ignore[union-attr]
    heading = text(re.search(r"<h1 id=\"run-h\">(.*?)</h1>", html, re.S).group(1))  # type: ignore[union-attr]
    assert title.startswith("matmul for v6e:1x1 (compile only)"), title
    assert heading.startswith("matmul for v6e:1x1"), heading
    page = text(html)
    said = SAYS_NOTHING_RAN.findall(page.lower())
    assert len(said) == 2, said  # "nothing was executed" and "no time, no speed", one sentence
    verdict = text(html.split('id="verdict"', 1)[1].split("</div>", 1)[0])
    assert "Compiled without the hardware for v6e:1x1" in verdict
    assert "Nothing was executed: libtpu built this program for 1 × TPU v6e (Trillium)" in verdict
    assert "no time, no speed and no correctness check" in verdict
    # The verdict comes first: before the target panel, which says only what it compiled.
    assert page.index("Nothing was executed") < page.index("Target v6e:1x1")
    assert "Compiled for 1 × v6e, by libtpu" in page
    # The worker's own sentence stays in the API, not on the page.
    assert "XLA built this program for v6e:1x1" not in page
    run = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["run"]
    assert any(w.startswith(DEVICELESS) for w in run["warnings"])


def test_only_the_warning_the_verdict_says_is_left_out() -> None:
    warnings = [f"{DEVICELESS} XLA built it …", "measure.cache=warm was not applied: …"]
    assert beyond_verdict(warnings, deviceless=True) == warnings[1:]
    assert beyond_verdict(warnings, deviceless=False) == warnings
    assert chip_name("v6e") == "TPU v6e (Trillium)" and chip_name("h100") == "NVIDIA H100 SXM"
    assert chip_name("tpu9") == "tpu9"


def test_an_unchecked_outputs_advice_follows_why_it_went_unchecked() -> None:
    """A stand-in too large for the worker is no reason to export for CPU (the artifact
    already is): the page suggests a reference made elsewhere, or a roomier worker."""
    from app.web.templating import unchecked_advice
    from workers.catalog.exported import STAND_IN_TOO_BIG

    too_big = f"output unchecked: no reference outputs were uploaded, and {STAND_IN_TOO_BIG} 82 GB"
    advice = unchecked_advice(too_big)
    assert "made elsewhere (params.reference" in advice and "BOUNDARY_MAX_JOB_BYTES" in advice
    assert "export it for CPU" not in advice
    plain = unchecked_advice("output unchecked: no reference outputs were uploaded, and no CPU")
    assert "export it for CPU too" in plain
