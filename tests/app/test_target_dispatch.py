"""Target jobs through the real API in-process: the combining rules answer 422 naming the
field; a compile-only target job is leased only to a worker that compiles for that
target, or to one with real devices of its model; one that executes waits for the
latter and never runs elsewhere."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import AUTH, FakeWorker, capabilities
from workers.protocol import TARGET_IDS

pytestmark = pytest.mark.anyio

TPU_COMPILE: dict[str, Any] = {
    "workload": "sharded-matmul",
    "path": "jax-tpu",
    "target": "v6e:2x4",
    "params": {"sharding": "tensor"},
}


def compiler_worker(targets: list[str]) -> dict[str, Any]:
    """A CPU worker that compiles for `targets` without their hardware."""
    return capabilities("cpu", targets=targets)


def real_v6e(count: int) -> dict[str, Any]:
    return capabilities(
        "tpu", device_kind="TPU v6 lite", device_count=count, paths=["jax-tpu"], targets=[]
    )


async def submit(client: httpx.AsyncClient, spec: dict[str, Any]) -> httpx.Response:
    return await client.post("/api/v1/jobs", json=spec)


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({**TPU_COMPILE, "path": "jax-gpu"}, "target", "does not go with path jax-gpu"),
        ({**TPU_COMPILE, "target": "v6e:32x32"}, "target", "not a v6e slice that is sold"),
        (
            {**TPU_COMPILE, "params": {"devices": 4}},
            "params.devices",
            "devices=4 does not match target v6e:2x4",
        ),
        (
            {"workload": "matmul", "path": "cuda", "target": "b200:4"},
            "target",
            "runs on one device",
        ),
    ],
)
async def test_a_target_that_does_not_combine_gets_422_naming_the_field(
    bench_client: httpx.AsyncClient, spec: dict[str, Any], field: str, says: str
) -> None:
    r = await submit(bench_client, spec)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert any(p["field"] == field and says in p["message"] for p in problems), problems


async def test_a_compile_only_target_job_goes_to_a_worker_with_that_target(
    bench_client: httpx.AsyncClient,
) -> None:
    plain = FakeWorker(bench_client, compiler_worker([]))
    gpu_only = FakeWorker(bench_client, compiler_worker(["b200:1", "h100:1"]))
    for worker in (plain, gpu_only):
        await worker.register()
    r = await submit(bench_client, TPU_COMPILE)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert await plain.lease() is None
    assert await gpu_only.lease() is None
    waiting = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert waiting["status"] == "queued"
    assert "no worker for jax-tpu compiling for v6e:2x4" in waiting["reason"]
    tpu_compiler = FakeWorker(bench_client, compiler_worker(list(TARGET_IDS)))
    await tpu_compiler.register()
    grant = await tpu_compiler.lease()
    assert grant is not None and grant["job_id"] == job_id
    assert grant["spec"]["target"] == "v6e:2x4" and grant["spec"]["stages"] == ["compile"]
    assert grant["spec"]["params"]["devices"] == 8  # defaulted to the target's count


async def test_a_real_v6e_worker_with_enough_chips_takes_a_target_job(
    bench_client: httpx.AsyncClient,
) -> None:
    too_small = FakeWorker(bench_client, real_v6e(4))
    await too_small.register()
    job_id = (await submit(bench_client, TPU_COMPILE)).json()["id"]
    assert await too_small.lease() is None
    slice_of_8 = FakeWorker(bench_client, real_v6e(8))
    await slice_of_8.register()
    grant = await slice_of_8.lease()
    assert grant is not None and grant["job_id"] == job_id


async def test_executing_a_target_waits_for_real_chips_and_never_compiles_elsewhere(
    bench_client: httpx.AsyncClient,
) -> None:
    compiler = FakeWorker(bench_client, compiler_worker(list(TARGET_IDS)))
    await compiler.register()
    spec = {**TPU_COMPILE, "stages": ["compile", "execute"]}
    job_id = (await submit(bench_client, spec)).json()["id"]
    assert await compiler.lease() is None
    waiting = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert "8 real TPU v6e (Trillium) device(s)" in waiting["reason"]
    real = FakeWorker(bench_client, real_v6e(8))
    await real.register()
    grant = await real.lease()
    assert grant is not None and grant["job_id"] == job_id


async def test_a_real_v5e_runs_v5e_1x1_and_a_v5p_whose_kind_begins_the_same_does_not(
    bench_client: httpx.AsyncClient,
) -> None:
    # JAX names a v5p chip "TPU v5" and a v5e chip "TPU v5 lite": matched whole.
    v5p = FakeWorker(
        bench_client,
        capabilities("tpu", device_kind="TPU v5", device_count=4, paths=["jax-tpu"]),
    )
    await v5p.register()
    spec = {"workload": "matmul", "target": "v5e:1x1", "stages": ["compile", "execute"]}
    job_id = (await submit(bench_client, spec)).json()["id"]
    assert await v5p.lease() is None
    waiting = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert "1 real TPU v5e device(s)" in waiting["reason"]
    v5e = FakeWorker(
        bench_client,
        capabilities("tpu", device_kind="TPU v5 lite", device_count=1, paths=["jax-tpu"]),
    )
    await v5e.register()
    grant = await v5e.lease()
    assert grant is not None and grant["job_id"] == job_id
    assert grant["spec"]["path"] == "jax-tpu"  # the target named it


@pytest.mark.parametrize("bad", ["v6e:32x32", "bogus<script>"])
async def test_a_worker_advertising_a_target_no_one_sells_is_refused_naming_it(
    bench_client: httpx.AsyncClient, bad: str
) -> None:
    r = await bench_client.post(
        "/api/v1/worker/register",
        json={"capabilities": compiler_worker(["v6e:2x4", bad])},
        headers=AUTH,
    )
    assert r.status_code == 422, r.text
    (problem,) = r.json()["detail"]
    assert problem["field"] == "capabilities.targets"
    assert repr(bad) in problem["message"] and "v6e:1x1 … v6e:16x16" in problem["message"]
    listed = (await bench_client.get("/api/v1/workers")).json()["data"]
    assert all(bad not in (w.get("targets") or []) for w in listed)
