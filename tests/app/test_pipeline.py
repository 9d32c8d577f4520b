"""The pass pipeline on a real CPU compile: captured apart from the timed compile, stored
apart from the run's JSON, listed by pipeline with each change's diff, and traced back
from the final HLO's fusions to the pass that made them."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.pages.compare.guard import run_facts
from tests.app.ir_runs import attention_with_pipeline, post_run
from workers.compiler.pipeline import read_dump

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def piped() -> dict[str, Any]:
    return attention_with_pipeline()


def test_the_capture_lists_passes_and_keeps_the_compile_time_plain(piped: dict[str, Any]) -> None:
    capture = piped["pipeline"]
    passes = {s["changed"] for s in capture["steps"]}
    assert {"layout-assignment", "fusion", "algsimp"} <= passes
    assert len(capture["snapshots"]) > 3 and capture["final"] and capture["cut"] is None
    assert capture["capture_s"] > 0
    assert piped["job"]["measure"]["pipeline"] is True


def test_the_capture_compiles_after_the_timed_compile_has_stopped() -> None:
    from workers.protocol import JobSpec, ProgressEvent
    from workers.run.engine import run_job

    events: list[ProgressEvent] = []
    spec = {
        "workload": "matmul",
        "params": {"m": 16, "n": 16, "k": 16},
        "stages": ["compile"],
        "measure": {"pipeline": True},
    }
    run = run_job(JobSpec.model_validate(spec), events.append)
    phases = [(str(e.phase), e.message) for e in events]
    timed = phases.index(("compiled", None))
    captured = phases.index(("compiled", "pass pipeline captured"))
    assert timed < captured  # the compile timer stopped before the dump's compile began
    assert run.pipeline is not None and run.pipeline.steps


def test_the_capture_stops_at_its_byte_cap(tmp_path: Path) -> None:
    names = [
        "module_0001.jit_f.0000.simplification.after_pipeline-start.before_algsimp.txt",
        "module_0001.jit_f.0001.simplification.after_algsimp.before_dce.txt",
        "module_0001.jit_f.0002.fusion.after_fusion.before_pipeline-end.txt",
    ]
    for i, name in enumerate(names):
        (tmp_path / name).write_text(f"HloModule jit_f\n%x{i} = f32[] constant({i})\n" * 400)
    whole = read_dump(tmp_path, 10**7)
    assert [s.changed for s in whole.steps] == ["pipeline-start", "algsimp", "fusion"]
    assert whole.cut is None
    cut = read_dump(tmp_path, len((tmp_path / names[0]).read_text()) + 10)
    assert len(cut.steps) == 1 and cut.cut and "BOUNDARY_PIPELINE_MAX_BYTES" in cut.cut


def test_pipeline_is_a_controlled_variable(piped: dict[str, Any]) -> None:
    job = {"workload": "attention", "run": piped}
    assert run_facts(job).controlled["measure.pipeline"] == "true"


async def test_the_pipeline_page_lists_passes_diffs_and_origins(
    bench_client: httpx.AsyncClient, piped: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, piped)
    stored = (await bench_client.get(f"/runs/{job_id}.json")).json()["run"]["pipeline"]
    assert stored["snapshots"] == [] and stored["steps"]  # the texts are kept apart
    run_page = (await bench_client.get(f"/runs/{job_id}")).text
    assert f'href="/runs/{job_id}/pipeline"' in run_page
    page = (await bench_client.get(f"/runs/{job_id}/pipeline")).text
    assert "Passes in order" in page
    assert '<p class="pipeline-name"><strong>simplification</strong></p>' in page
    assert page.count('<span class="tag">changed</span>') >= 3
    assert "no change" in page
    # The softmax's fusions trace back to the pass that created them.
    origin = re.search(
        r'<tr id="o-(?P<name>[\w.\-]*fusion[\w.\-]*)"><td>.*?</td><td>fusion</td>\s*<td>'
        r'<a href="(?P<href>[^"]+)">(?P<pass>[^<]+)</a>',
        page,
        re.S,
    )
    assert origin, "no fusion traced back to a pass"
    diff = (await bench_client.get(unescape(origin.group("href")).split("#")[0])).text
    assert 'class="d-add"' in diff and f"%{origin.group('name')} = " in unescape(diff)
    # The run's summary names the same pass for that fusion.
    explained = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["run"]["hlo_explained"]
    made = {e["name"]: e["made_by"] for e in explained}
    assert made[origin.group("name")] == unescape(origin.group("pass"))
    none = await bench_client.get(f"/runs/{job_id}/pipeline", params={"step": 99999})
    assert none.status_code == 404


async def test_a_run_without_a_pipeline_says_how_to_get_one(
    bench_client: httpx.AsyncClient, piped: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, {**piped, "pipeline": None})
    r = await bench_client.get(f"/runs/{job_id}/pipeline")
    assert r.status_code == 404 and "--pipeline" in r.text and "per-pass dump" in r.text


async def test_two_pipelines_side_by_side_aligned_by_pass(
    bench_client: httpx.AsyncClient, piped: dict[str, Any]
) -> None:
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    matmul = run_job(
        JobSpec.model_validate(
            {
                "workload": "matmul",
                "params": {"m": 32, "n": 32, "k": 32},
                "stages": ["compile"],
                "measure": {"pipeline": True},
            }
        )
    ).model_dump(mode="json")
    a = await post_run(bench_client, piped)
    b = await post_run(bench_client, matmul)
    page = (await bench_client.get("/compare/pipelines", params={"a": a, "b": b})).text
    both = re.findall(r'<tr class="both">(.*?)</tr>', page, re.S)
    alone = re.findall(r'<tr class="only-[ab]">', page)
    assert both and alone  # attention and matmul share most passes, not all snapshots
    assert f"/runs/{a}/pipeline?step=" in page and f"/runs/{b}/pipeline?step=" in page
    for row in both:  # an aligned row names the same pass on both sides
        labels = re.findall(r"<td>(?:<a [^>]*>)?([^<]+)", row)
        assert len(labels) == 2 and labels[0].strip() == labels[1].strip()
    compared = (await bench_client.get("/compare", params={"a": a, "b": b})).text
    assert (
        f'href="/compare/pipelines?a={a}&amp;b={b}">Their pass pipelines side by side' in compared
    )
    plain = await post_run(bench_client, {**matmul, "pipeline": None})
    unpiped = (await bench_client.get("/compare", params={"a": a, "b": plain})).text
    assert "/compare/pipelines" not in unpiped  # no link that would answer 404
    assert "To set their pass pipelines side by side, compile both with" in unpiped
    missing = await bench_client.get("/compare/pipelines", params={"a": a, "b": "nope"})
    # The pipeline page's own form lands here: a mistyped run is a site page, not JSON.
    assert missing.status_code == 404 and "no pass pipeline" in missing.text
    assert "text/html" in missing.headers["content-type"] and "Nothing to compare" in missing.text


async def test_compile_again_with_the_pipeline_queues_the_same_job_with_it(
    bench_client: httpx.AsyncClient, piped: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, {**piped, "pipeline": None})
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Compile again with the pipeline" in page
    again = await bench_client.post(f"/runs/{job_id}/repeat", data={"pipeline": "on"})
    assert again.status_code == 303
    new_id = again.headers["location"].rsplit("/", 1)[1]
    queued = (await bench_client.get(f"/api/v1/jobs/{new_id}")).json()
    old = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert queued["status"] == "queued" and new_id != job_id
    assert queued["measure"]["pipeline"] is True and queued["params"] == old["params"]


async def test_an_ir_the_run_lacks_is_named_under_its_run_not_no_such_run(
    bench_client: httpx.AsyncClient, piped: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, piped)  # a jax-cpu run: no PTX, no SASS
    for name, heading in (("sass", "This run has no sass"), ("nope", "No such IR")):
        r = await bench_client.get(f"/runs/{job_id}/ir/{name}")
        assert r.status_code == 404 and "text/html" in r.headers["content-type"]
        assert f'<h1 id="error-h">{heading}</h1>' in r.text and "No such run" not in r.text
        assert f'href="/runs/{job_id}"' in r.text
    gone = await bench_client.get("/runs/0000000000000000/ir/hlo")
    assert gone.status_code == 404 and "No such run" in gone.text
