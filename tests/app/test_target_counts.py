"""A target run's page says what the compiler counted for one device, and what it did not
report, never a 0 in place of a figure."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker, capabilities, run_result

pytestmark = pytest.mark.anyio


async def _target_page(
    client: httpx.AsyncClient, target: str, cost: dict[str, float] | None, temp: int
) -> str:
    worker = FakeWorker(client, capabilities(targets=[target]))
    await worker.register()
    path = "jax-tpu" if target.startswith("v6e") else "jax-gpu"
    spec = {"workload": "matmul", "path": path, "target": target, "params": {"m": 64}}
    assert (await client.post("/api/v1/jobs", json=spec)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    result = run_result(grant["spec"])
    memory = {
        "peak_bytes": 9_210_000,
        "temp_bytes": temp,
        "hbm_bytes": 1,
        "hbm_label": "x",
        "source": "x",
    }
    result.update(measurements=[], correctness=None, cost_analysis=cost)
    result["target"] = {
        "id": target,
        "model": "x",
        "count": 1,
        "compiler": "c",
        "deviceless": True,
        "memory": memory,
    }
    body = {"worker_id": worker.id, "job_id": grant["job_id"], "result": result}
    assert (await worker.post("result", body)).status_code == 200
    return (await client.get(f"/runs/{grant['job_id']}")).text


def _cell(page: str, label: str) -> str:
    """The figure of the memory table's row `label`, as a person reads it."""
    found = re.search(label + r"</th><td[^>]*>([^<]*)", page)
    assert found is not None, label
    return found.group(1).strip()


async def test_a_tpu_runs_counts_are_shown_and_its_temporaries_are_not_reported(
    bench_client: httpx.AsyncClient,
) -> None:
    cost = {"flops": 3.02e9, "bytes_accessed": 9.42e7}
    page = await _target_page(bench_client, "v6e:1x1", cost, temp=0)
    assert "3.02 GFLOP" in page and "94.2 MB" in page
    # libtpu's 0 is no size: the row says who did not report it.
    assert _cell(page, "temporaries") == "not reported by libtpu without the device"


async def test_a_gpu_run_without_counts_says_so(bench_client: httpx.AsyncClient) -> None:
    page = await _target_page(bench_client, "h100:1", None, temp=1_000_000)
    assert "FLOPs not reported" in page and "by XLA:GPU without the device" in page
    assert _cell(page, "temporaries").startswith("1 MB")  # XLA:GPU's own figure
