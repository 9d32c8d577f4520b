"""A fit search over an uploaded function's symbolic dimension: the tests' own model,
exported with `export-fn --symbolic b=tokens`, searched over `b` (each probe is
`params.dims.b = value`); and with real deviceless compiles for h100:1, where each
probe's verdict is its own run's `memory_analysis()` peak against the usable bytes."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.app.bench_fakes import AUTH
from tests.app.fit_fakes import affine, play, probe_worker
from tests.workers.own_exports import MODEL, export_fn
from workers.files import FileCache
from workers.protocol import JobSpec

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
OCTET = {"Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def symbolic_forward(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The own model's forward, its batch symbolic (`b`), as an artifact."""
    folder = tmp_path_factory.mktemp("symbolic-fit")
    args = [f"{MODEL}:forward", "--example", f"{MODEL}:forward_example"]
    done = export_fn([*args, "--symbolic", "b=tokens", "-o", "fwd.jaxexport"], folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return (folder / "fwd.jaxexport").read_bytes()


async def upload(client: httpx.AsyncClient, data: bytes) -> str:
    up = await client.post(
        "/api/v1/artifacts", params={"kind": "exported"}, content=data, headers=OCTET
    )
    assert up.status_code == 201, up.text
    sha: str = up.json()["sha256"]
    return sha


async def test_a_search_over_a_symbolic_dimension_sets_params_dims(
    bench_client: httpx.AsyncClient, symbolic_forward: bytes
) -> None:
    sha = await upload(bench_client, symbolic_forward)
    search = {"artifact": sha, "dimension": "b", "range": [8, 4096], "step": 8}
    wrong = {**search, "dimension": "s", "targets": ["h100:1"]}
    refused = await bench_client.post("/api/v1/fits", json=wrong)
    assert refused.status_code == 422
    said = {"field": "dimension", "message": "the artifact has no dimension s (its dimensions: b)"}
    assert said in refused.json()["detail"]
    given = {**search, "params": {"dims": {"b": 4}}, "targets": ["h100:1"]}
    twice = (await bench_client.post("/api/v1/fits", json=given)).json()["detail"]
    assert twice[0]["field"] == "params.dims.b"

    targets = ["v6e:1x1", "b200:1"]
    created = await bench_client.post("/api/v1/fits", json={**search, "targets": targets})
    assert created.status_code == 202, created.text
    fit_id = created.json()["id"]
    worker = await probe_worker(bench_client, targets)
    grants = await play(worker, affine(10**9, 10**8), name="b")
    assert {g["spec"]["workload"] for g in grants} == {"exported"}
    assert all(g["spec"]["params"]["artifact"] == sha for g in grants)
    fit = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()
    assert fit["status"] == "done" and fit["artifact"] == sha
    tpu, gpu = fit["targets"]
    assert tpu["largest_fitting"] == 320  # 1e9 + 1e8 b ≤ 31.25 GiB up to 325, on a grid of 8s
    assert gpu["largest_fitting"] == 1336  # ≤ 0.75 × 180 GB up to 1340


async def test_real_compiles_prove_the_answer_by_the_stated_criterion(
    bench_client: httpx.AsyncClient, symbolic_forward: bytes, tmp_path: Path
) -> None:
    from workers.run.engine import run_job

    sha = await upload(bench_client, symbolic_forward)
    search = {
        "artifact": sha,
        "dimension": "b",
        "range": [1, 1 << 20],
        "targets": ["h100:1"],
        "usable_fraction": 0.6,  # not JAX's default: each probe's run must say the same
    }
    created = await bench_client.post("/api/v1/fits", json=search)
    assert created.status_code == 202, created.text
    fit_id = created.json()["id"]
    worker = await probe_worker(bench_client, ["h100:1"])
    files = FileCache(tmp_path / "files")
    got = await bench_client.get(f"/api/v1/worker/files/{sha}", headers=AUTH)
    assert files.put(got.content) == sha
    for _ in range(40):
        grant = await worker.lease()
        if grant is None:
            break
        result = run_job(JobSpec.model_validate(grant["spec"]), files_dir=files.directory)
        reply = await worker.finish(grant, **json.loads(result.model_dump_json()))
        assert reply.status_code == 200, reply.text
    fit = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()
    assert fit["status"] == "done", fit
    (target,) = fit["targets"]
    usable = target["usable_bytes"]
    assert usable == int(80 * 10**9 * 0.6)
    for probe in target["probes"]:
        run = (await bench_client.get(f"/api/v1/jobs/{probe['run_id']}")).json()["run"]
        peak = run["memory_analysis"]["peak_bytes"]
        assert probe["peak_bytes"] == peak and probe["fits"] == (peak <= usable)
        # One capacity: the probe's own run page holds it against the same usable bytes.
        memory = run["target"]["memory"]
        assert (
            memory["usable_bytes"] == usable and (memory["peak_bytes"] <= usable) == probe["fits"]
        )
        assert memory["usable_source"].startswith("0.6 × the published HBM")
        assert run["job"]["usable_fraction"] == 0.6
        assert run["job"]["dumps"] == "none" and not run["artifacts"]["ptx"]
        assert run["memory_report"] is not None  # where its memory goes, on its page
        assert "not asked for" in run["target"]["compile_timing"]
    largest = target["largest_fitting"]
    assert target["peak_bytes_at_largest"] <= usable
    if not target["largest_is_hi"]:
        assert target["value_above"] == largest + 1 and target["peak_bytes_above"] > usable
    assert len(target["probes"]) <= 8
