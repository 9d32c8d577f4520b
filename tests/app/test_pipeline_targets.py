"""The pipeline and fusion decisions for targets compiled without their hardware: a v6e
2x4 slice's all-reduce traces back to the SPMD partitioner, and a B200 run shows the GPU
fusion pass's decisions. Real compiles (libtpu, JAX's CUDA plugin), so marked slow."""

from __future__ import annotations

import importlib.util
import re
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.ir_runs import post_run
from tests.dependencies import require
from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def needs_libtpu() -> None:
    if importlib.util.find_spec("libtpu") is None:
        require("libtpu", "libtpu is not installed (pip install -e . brings jax[tpu])")


@pytest.fixture
def needs_cuda_plugin() -> None:
    if (
        importlib.util.find_spec("jax_plugins.xla_cuda13") is None
        and importlib.util.find_spec("jax_cuda13_plugin") is None
    ):
        require("cuda-plugin", "JAX's CUDA plugin is not installed (jax[cuda13-local])")


def _run(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    return run_job(JobSpec.model_validate(spec), cache_dir=tmp / "cache").model_dump(mode="json")


@pytest.mark.usefixtures("needs_libtpu")
async def test_a_v6e_all_reduce_traces_back_to_the_spmd_partitioner(
    bench_client: httpx.AsyncClient, tmp_path: Path
) -> None:
    spec = {
        "workload": "sharded-matmul",
        "path": "jax-tpu",
        "target": "v6e:2x4",
        "params": {"sharding": "tensor"},
        "measure": {"pipeline": True},
    }
    run = _run(spec, tmp_path)
    steps = run["pipeline"]["steps"]
    assert any("spmd" in s["changed"] for s in steps)
    job_id = await post_run(bench_client, run)
    page = unescape((await bench_client.get(f"/runs/{job_id}/pipeline")).text)
    row = re.search(r'<tr id="o-(all-reduce[\w.\-]*)">.*?</tr>', page, re.S)
    assert row and "tpu-spmd-partitioning" in row.group(0)
    explained = {e["name"]: e for e in run_json(await bench_client.get(f"/runs/{job_id}.json"))}
    assert "spmd-partitioning" in (explained[row.group(1)]["made_by"] or "")


def run_json(response: httpx.Response) -> list[dict[str, Any]]:
    explained: list[dict[str, Any]] = response.json()["run"]["hlo_explained"]
    return explained


@pytest.mark.usefixtures("needs_cuda_plugin")
async def test_a_b200_run_shows_its_fusion_decisions(
    bench_client: httpx.AsyncClient, tmp_path: Path
) -> None:
    spec = {
        "workload": "attention",
        "path": "jax-gpu",
        "target": "b200:1",
        "params": {"batch": 1, "heads": 2, "seq_len": 128, "head_dim": 64},
    }
    run = _run(spec, tmp_path)  # no --pipeline: the PTX's dump already holds the reports
    assert "priority_fusion_dump.txt" in run["pipeline"]["files"]
    assert run["pipeline"]["steps"] == []
    job_id = await post_run(bench_client, run)
    assert "fusion decisions" in (await bench_client.get(f"/runs/{job_id}")).text
    page = (await bench_client.get(f"/runs/{job_id}/pipeline")).text
    assert '<tr class="fused">' in page and '<tr class="refused">' in page
    assert "not a time" in page and "(model)" in page
    assert "thunk_sequence.txt" in page


@pytest.mark.usefixtures("needs_cuda_plugin")
def test_a_renamed_gpu_fusion_traces_back_through_the_rename_to_the_pass_that_made_it(
    tmp_path: Path,
) -> None:
    from app.ir.pipeline import origins
    from workers.protocol import RunResult

    spec = {
        "workload": "elementwise",
        "path": "jax-gpu",
        "target": "b200:1",
        "measure": {"pipeline": True},
    }
    run = RunResult.model_validate(_run(spec, tmp_path))
    assert run.pipeline is not None and run.artifacts.hlo is not None
    changed = [s.changed for s in run.pipeline.steps]
    assert "rename_fusions" in changed  # XLA:GPU names each fusion after its hero at the end
    fusions = [o for o in origins(run.pipeline, run.artifacts.hlo) if o.op == "fusion"]
    assert fusions, run.artifacts.hlo
    for fusion in fusions:
        # The final name (e.g. loop_cosine_fusion) first appears after rename_fusions; the
        # fusion itself was made by priority fusion under its earlier name.
        assert fusion.pass_name == "priority-fusion", fusion
        assert fusion.via is not None and fusion.via != fusion.name, fusion
