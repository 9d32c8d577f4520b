"""Profiler traces: the engine records the sampled calls only and packs a trace that XProf
and Perfetto open; the server stores it, and the run page offers it for download."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker
from workers.measure.profile import OVERHEAD_WARNING
from workers.protocol import JobSpec
from workers.run.engine import run_job

SPEC: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 48, "n": 40, "k": 32},
    "measure": {"samples": 5, "profile": True},
}


@pytest.fixture(scope="module")
def profiled() -> dict[str, Any]:
    return run_job(JobSpec.model_validate(SPEC)).model_dump(mode="json")


def members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        out = {}
        for info in tar.getmembers():
            handle = tar.extractfile(info)
            assert handle is not None
            out[info.name] = handle.read()
        return out


def test_the_engine_packs_a_trace_of_the_sampled_calls(profiled: dict[str, Any]) -> None:
    trace = profiled["profile"]
    archive = base64.b64decode(trace["data_b64"])
    assert len(archive) == trace["size"] > 0
    assert hashlib.sha256(archive).hexdigest() == trace["sha256"]
    files = members(archive)
    assert sorted(files) == trace["files"]
    xplane = [n for n in files if n.endswith(".xplane.pb")]
    assert xplane and all(n.startswith("plugins/profile/") for n in files)  # XProf's layout
    assert all(len(files[n]) > 0 for n in files)
    events = json.loads(gzip.decompress(files[trace["perfetto"]]))["traceEvents"]
    assert len(events) > 10  # Perfetto's Chrome JSON format, with something in it
    assert trace["calls"] == 6  # 5 timed calls and the untimed one whose output is checked
    assert trace["boundary"] == "host-sync"
    assert "5 samples of the host-sync" in trace["covers"]
    assert "not tracing, lowering, compiling or the warm-up" in trace["covers"]
    assert OVERHEAD_WARNING in profiled["warnings"]


def test_no_trace_unless_asked() -> None:
    spec = {**SPEC, "measure": {"samples": 2}}
    run = run_job(JobSpec.model_validate(spec))
    assert run.profile is None
    assert OVERHEAD_WARNING not in run.warnings


@pytest.mark.anyio
async def test_the_server_stores_the_trace_and_offers_it(
    bench_client: httpx.AsyncClient, profiled: dict[str, Any]
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    r = await bench_client.post("/api/v1/jobs", json=SPEC)
    job_id = r.json()["id"]
    grant = await worker.lease()
    assert grant is not None
    body = {"worker_id": worker.id, "job_id": job_id, "attempt": grant["attempt"]}
    posted = await worker.post("result", {**body, "result": {**profiled, "job": grant["spec"]}})
    assert posted.status_code == 200, posted.text

    stored = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["run"]["profile"]
    assert stored["data_b64"] is None and stored["stored"] is True  # the bytes left the JSON
    download = await bench_client.get(f"/runs/{job_id}/profile")
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/gzip"
    assert hashlib.sha256(download.content).hexdigest() == profiled["profile"]["sha256"]
    assert any(n.endswith(".xplane.pb") for n in members(download.content))
    perfetto = await bench_client.get(f"/runs/{job_id}/profile/perfetto.json.gz")
    assert perfetto.status_code == 200
    assert json.loads(gzip.decompress(perfetto.content))["traceEvents"]

    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Profiler trace" in page and f'href="/runs/{job_id}/profile"' in page
    assert "5 samples of the host-sync" in page and "xprof --logdir" in page


@pytest.mark.anyio
async def test_a_trace_that_does_not_match_its_hash_is_dropped(
    bench_client: httpx.AsyncClient, profiled: dict[str, Any]
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = (await bench_client.post("/api/v1/jobs", json=SPEC)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    bad = {**profiled, "job": grant["spec"]}
    bad["profile"] = {**profiled["profile"], "sha256": "0" * 64}
    body = {"worker_id": worker.id, "job_id": job_id, "attempt": grant["attempt"], "result": bad}
    assert (await worker.post("result", body)).status_code == 200
    run = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["run"]
    assert run["profile"] is None
    assert any("do not match the sha256" in w for w in run["warnings"])
    assert (await bench_client.get(f"/runs/{job_id}/profile")).status_code == 404
