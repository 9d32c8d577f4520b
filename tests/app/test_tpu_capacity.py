"""Every TPU generation on the server: a worker states what its libtpu makes available on
each TPU target (usable_bytes), and the target listing, the fit search, its page and MCP's
list_targets name that figure with the published HBM beside it; a target names its path."""

from __future__ import annotations

import json

import httpx
import pytest

from app.mcp.catalog import targets_answer
from tests.app.bench_fakes import FakeWorker, capabilities

pytestmark = pytest.mark.anyio

V5E_USABLE = 16_909_336_064
"""libtpu 0.0.42's usable bytes on v5e:1x1: the bytes_limit a real v5e chip reports."""
TARGETS = ["v5e:1x1", "v6e:1x1", "v4:2x2x1", "h100:1"]


async def tpu_worker(client: httpx.AsyncClient) -> FakeWorker:
    caps = capabilities("cpu", targets=TARGETS, capacities={"v5e:1x1": V5E_USABLE})
    worker = FakeWorker(client, caps)
    await worker.register()
    return worker


async def test_the_target_listing_names_usable_bytes_beside_the_published_hbm(
    bench_client: httpx.AsyncClient,
) -> None:
    await tpu_worker(bench_client)
    listing = (await bench_client.get("/api/v1/targets")).json()
    rows = {t["id"]: t for t in listing["data"]}
    assert listing["count"] == len(rows) and {"v5e:16x16", "v5p:16x16x24", "tpu7x:1x1x1"} <= set(
        rows
    )
    v5e = rows["v5e:1x1"]
    assert (v5e["usable_bytes"], v5e["hbm_bytes"], v5e["path"]) == (V5E_USABLE, 2**34, "jax-tpu")
    assert v5e["compiled_by"] and not v5e["executed_by"]
    assert rows["v6e:1x1"]["usable_bytes"] is None  # no worker has read it yet: not a guess
    assert rows["v6e:1x1"]["usable_source"].startswith("not reported yet")
    assert (rows["v4:2x2x1"]["chips"], rows["v4:2x2x1"]["devices"]) == (4, 8)
    assert rows["v4:2x2x1"]["hbm_bytes"] == 16 * 2**30  # a chip's 32 GiB, two devices
    assert rows["h100:1"]["usable_bytes"] == 60 * 10**9  # JAX's 0.75 of 80 GB
    chips = {c["model"]: c for c in listing["chips"]}
    assert round(chips["v5e"]["clock_hz"] / 1e6) == 1503 and chips["v5e"]["clock"]["how"]
    assert chips["v6e"]["clock_hz"] is None and chips["v6e"]["clock"]["missing"]
    assert {p["dtype"]: p["per_s"] for p in chips["tpu7x"]["peaks"]}["bfloat16"] == 2307e12
    # MCP's list_targets is this listing by model, within its answer's bound.
    answer = targets_answer(listing)
    by_model = {m["model"]: m for m in answer["models"]}
    assert by_model["v5e"]["targets"][0] == {
        "id": "v5e:1x1",
        "devices": 1,
        "usable_bytes": V5E_USABLE,
        "compiled_by": ["fake"],
    }
    assert len(json.dumps(answer)) < 20_000  # every target in one MCP answer


async def test_a_fit_search_on_v5e_sets_libtpus_figure_against_the_published_hbm(
    bench_client: httpx.AsyncClient,
) -> None:
    await tpu_worker(bench_client)
    search = {
        "workload": "matmul",
        "params": {"n": 1024, "k": 1024, "dtype": "bfloat16"},
        "dimension": "m",
        "range": [1, 1024],
        "targets": ["v5e:1x1", "v6e:1x1"],
    }
    created = await bench_client.post("/api/v1/fits", json=search)
    assert created.status_code == 202, created.text
    fit_id = created.json()["id"]
    v5e, v6e = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()["targets"]
    assert (v5e["path"], v5e["usable_bytes"], v5e["hbm_bytes"]) == ("jax-tpu", V5E_USABLE, 2**34)
    assert f"{V5E_USABLE:,} of the published 16 GB HBM2" in v5e["criterion"]
    assert v6e["usable_bytes"] is None and "not reported yet" in v6e["criterion"]
    page = (await bench_client.get(f"/fits/{fit_id}")).text
    assert f"usable: 16.9 GB ({V5E_USABLE:,} bytes)" in page
    assert "published: 16 GB HBM2 per chip" in page


async def test_a_target_names_its_path_and_a_worker_states_only_its_tpu_targets_figures(
    bench_client: httpx.AsyncClient,
) -> None:
    job = {"workload": "matmul", "target": "v5e:1x1", "params": {"m": 256, "n": 256, "k": 256}}
    queued = await bench_client.post("/api/v1/jobs", json=job)
    assert queued.status_code == 202, queued.text
    assert (await bench_client.get(f"/api/v1/jobs/{queued.json()['id']}")).json()["path"] == (
        "jax-tpu"
    )
    form = (await bench_client.get("/runs/new?workload=matmul&target=v5e:1x1")).text
    assert '<option value="jax-tpu" selected' in form
    for capacities in ({"h100:1": 10**9}, {"v5e:2x2": 10**9}, {"v5e:1x1": 2**40}):
        caps = capabilities("cpu", targets=["v5e:1x1", "h100:1"], capacities=capacities)
        refused = await FakeWorker(bench_client).post(
            "register", {"capabilities": caps, "name": "w"}
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["field"] == "capabilities.capacities"
