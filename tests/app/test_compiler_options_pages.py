"""Compiler options on the server: refused with 422 naming the field, kept with the job,
queued from the run form and as a matrix's columns, named by the comparison as its one
variable (with the HLO diff), and listed with worked examples on /compiler-options."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from app.pages.compare.guard import OPTIONS, guard, run_facts
from tests.app.ir_runs import post_run

pytestmark = pytest.mark.anyio

B200 = {
    "workload": "matmul",
    "path": "jax-gpu",
    "target": "b200:1",
    "params": {"m": 256, "n": 256, "k": 256, "dtype": "bfloat16"},
}
TRITON_OFF = {"xla_gpu_enable_triton_gemm": False}


def text(html: str) -> str:
    """What a person reads: the page without its tags."""
    return unescape(re.sub(r"<[^>]+>", "", html))


@pytest.mark.parametrize(
    ("options", "path", "words"),
    [
        ({"xla_dump_to": "/tmp/x"}, "jax-gpu", "xla_dump_to is not allowed: it writes dump files"),
        ({"xla_gpu_enable_triton_gemm": "false"}, "jax-gpu", "takes true or false; 'false'"),
        ({"xla_gpu_autotune_level": 9}, "jax-gpu", "a whole number from 0 to 4; 9 is not one"),
        (TRITON_OFF, "jax-tpu", "it is an option of XLA:GPU, and this job compiles with libtpu"),
        (TRITON_OFF, "cuda", "path cuda compiles CUDA C++ with nvcc, not with XLA"),
    ],
)
async def test_the_api_refuses_an_option_naming_the_field(
    bench_client: httpx.AsyncClient, options: dict[str, Any], path: str, words: str
) -> None:
    body = {"workload": "matmul", "path": path, "compiler_options": options}
    r = await bench_client.post("/api/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    (problem,) = r.json()["detail"]
    assert problem["field"] == "compiler_options" and words in problem["message"]


async def test_a_job_keeps_its_options_in_its_json_and_on_its_pages(
    bench_client: httpx.AsyncClient,
) -> None:
    body = {**B200, "compiler_options": {"xla_gpu_autotune_level": 0, **TRITON_OFF}}
    queued = await bench_client.post("/api/v1/jobs", json=body)
    assert queued.status_code == 202, queued.text
    job_id = queued.json()["id"]
    job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    # Sorted by name, each of the type its compiler takes.
    assert job["compiler_options"] == {
        "xla_gpu_autotune_level": 0,
        "xla_gpu_enable_triton_gemm": False,
    }
    page = text((await bench_client.get(f"/runs/{job_id}")).text)
    assert "XLA options of every compile of this job: xla_gpu_autotune_level=0, " in page
    assert "--xla-option xla_gpu_enable_triton_gemm=false" in page  # the reproduce command
    runs = text((await bench_client.get("/runs")).text)
    assert "xla_gpu_autotune_level=0, xla_gpu_enable_triton_gemm=false" in runs


async def test_the_run_form_queues_options_and_names_a_bad_one(
    bench_client: httpx.AsyncClient,
) -> None:
    form = {
        "workload": "matmul",
        "path": "jax-gpu",
        "target": "b200:1",
        "stages": "compile",
        "compiler_options": "xla_gpu_enable_triton_gemm=false\n# a note\n\n",
    }
    sent = await bench_client.post("/runs", data=form)
    assert sent.status_code == 303, sent.text
    job = (await bench_client.get(sent.headers["location"] + ".json")).json()
    assert job["compiler_options"] == TRITON_OFF
    bad = await bench_client.post("/runs", data={**form, "compiler_options": "xla_dump_to=/x"})
    assert bad.status_code == 422
    page = unescape(bad.text)
    assert "xla_dump_to is not allowed: it writes dump files on the worker" in page
    assert "xla_dump_to=/x</textarea>" in page  # what was typed is kept


async def test_the_options_page_lists_each_compiler_and_fills_the_form(
    bench_client: httpx.AsyncClient,
) -> None:
    twin = (await bench_client.get("/compiler-options.json")).json()
    assert [c["name"] for c in twin["compilers"]] == ["XLA:CPU", "XLA:GPU", "libtpu"]
    assert [e["id"] for e in twin["examples"]] == [
        "triton-gemm-off",
        "autotune-level",
        "exhaustive-tiling",
        "collective-matmul",
    ]
    page = unescape((await bench_client.get("/compiler-options")).text)
    assert "Nothing changes without a GPU" in page
    assert "The optimized HLO did not change for this program." in page
    link = re.search(r'href="(/runs/new\?[^"]*triton[^"]*)"', page)
    assert link is not None
    form = unescape((await bench_client.get(link.group(1))).text)
    assert ">xla_gpu_enable_triton_gemm=false</textarea>" in form
    assert '<option value="b200:1" selected>' in form


async def test_a_matrix_takes_compiler_options_as_its_columns(
    bench_client: httpx.AsyncClient,
) -> None:
    spec = {
        "workload": "matmul",
        "axis": {"name": "m", "values": [256]},
        "targets": ["b200:1"],
        "columns": {
            "name": "compiler_options",
            "values": [{}, TRITON_OFF, {"xla_cpu_enable_fast_math": True}],
        },
    }
    r = await bench_client.post("/api/v1/matrices", json=spec)
    assert r.status_code == 201, r.text
    matrix = (await bench_client.get(f"/matrices/{r.json()['id']}.json")).json()
    labels = [c["label"] for c in matrix["columns"]]
    assert labels == [
        "b200:1 (jax-gpu) · no compiler options",
        "b200:1 (jax-gpu) · xla_gpu_enable_triton_gemm=false",
        "b200:1 (jax-gpu) · xla_cpu_enable_fast_math=true",
    ]
    plain, off, cpu_only = matrix["rows"][0]["cells"]
    assert (await bench_client.get(f"/api/v1/jobs/{plain['job']}")).json()["compiler_options"] == {}
    job = (await bench_client.get(f"/api/v1/jobs/{off['job']}")).json()
    assert job["compiler_options"] == TRITON_OFF
    assert cpu_only.get("job") is None and "an option of XLA:CPU" in cpu_only["reason"]


def _facts(job_id: str, target: str, options: dict[str, Any] | None) -> Any:
    job: dict[str, Any] = {
        "id": job_id,
        "status": "done",
        "workload": "matmul",
        "path": "jax-gpu",
        "params": {"m": 256},
        "stages": ["compile"],
        "target": target,
        "run": {"valid": True, "params": {"m": 256}, "job": {}},
    }
    if options is not None:  # a run from before compiler options existed has no field
        job["compiler_options"] = options
    return run_facts(job)


def test_options_are_the_experiment_alone_and_a_mismatch_beside_another_change() -> None:
    alone = guard([_facts("a", "b200:1", None)], [_facts("b", "b200:1", TRITON_OFF)])
    assert alone.comparable
    assert alone.experimental == [(OPTIONS, "none", "xla_gpu_enable_triton_gemm=false")]
    same = guard([_facts("a", "b200:1", None)], [_facts("b", "b200:1", {})])
    assert same.comparable and same.experimental == []  # an old run reads as "none"
    both = guard([_facts("a", "b200:1", None)], [_facts("b", "h100:1", TRITON_OFF)])
    assert not both.comparable
    (mismatch,) = both.mismatches
    assert mismatch.variable == OPTIONS and "target differs too" in mismatch.why


@pytest.mark.slow
async def test_two_b200_runs_that_differ_in_one_option_name_it_with_the_hlo_diff(
    bench_client: httpx.AsyncClient,
) -> None:
    """The issue's "done when": the comparison names the option as its one variable and
    shows the optimized HLO diff (real compiles for a B200, without the hardware)."""
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    plain = run_job(JobSpec.model_validate(B200)).model_dump(mode="json")
    off = run_job(JobSpec.model_validate({**B200, "compiler_options": TRITON_OFF}))
    a = await post_run(bench_client, plain)
    b = await post_run(bench_client, off.model_dump(mode="json"))
    twin = (await bench_client.get(f"/compare.json?a={a}&b={b}")).json()
    assert twin["guard"]["experimental"] == [
        {"variable": OPTIONS, "a": "none", "b": "xla_gpu_enable_triton_gemm=false"}
    ]
    assert twin["verdict"]["headline"] == (
        "Like with like: one variable changed (compiler options: xla_gpu_enable_triton_gemm=false)"
    )
    assert twin["diff"]["name"] == "hlo" and not twin["diff"]["identical"]
    page = unescape((await bench_client.get(f"/compare?a={a}&b={b}")).text)
    assert "__triton_nested_gemm_fusion" in page and "__cublas$lt$matmul" in page
    # Compile-only: nothing timed, so no boundary and no decision record (422, no link).
    assert "boundary <code>None</code>" not in page and "no timing boundary is compared" in page
    assert "/compare/decision." not in page
    record = await bench_client.get(f"/compare/decision.json?a={a}&b={b}")
    assert record.status_code == 422 and "nothing was timed" in record.text
