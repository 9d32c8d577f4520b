"""End to end: a function exported here, uploaded to a real server, fetched and run by a
real worker process on the CPU path, and checked against uploaded reference outputs."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import httpx
import jax
import numpy as np
import pytest

from tests.workers.test_agent_e2e import Cluster, cluster  # noqa: F401 - the fixture
from workers.cli.export_fn import export_function
from workers.export.rules import generate
from workers.workloads.base import InputSpec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def scaled_softmax(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x * 0.5, axis=-1)


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def upload(client: httpx.Client, data: bytes, kind: str) -> str:
    r = client.post(
        "/api/v1/artifacts",
        params={"kind": kind},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 201, r.text
    sha: str = r.json()["sha256"]
    return sha


def test_a_real_worker_fetches_and_runs_an_uploaded_function(
    cluster: Callable[..., Cluster],  # noqa: F811 - the imported fixture
) -> None:
    data, _ = export_function(scaled_softmax, [("float32", (6, 40))], ["cpu", "cuda"])
    (x,) = generate([InputSpec("arg0", (6, 40), "float32")], None, 0)
    z = x.astype(np.float64) * 0.5
    expected = np.exp(z - z.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)

    c = cluster()
    c.start_server()
    c.start_worker("w1")
    c.wait_worker("w1")
    artifact = upload(c.client, data, "exported")
    reference = upload(c.client, npz(out0=expected), "npz")
    job_id = c.submit(
        {
            "workload": "exported",
            "path": "jax-cpu",
            "params": {"artifact": artifact, "reference": reference},
            "measure": {"samples": 4},
        }
    )
    job = c.wait_status(job_id, {"done", "failed"})
    assert job["status"] == "done", job
    run = job["run"]
    assert run["valid"] and run["correctness"]["passed"]
    assert run["correctness"]["reference"] == "uploaded reference outputs"
    assert len(run["measurements"][0]["samples_s"]) == 4
    assert (c.tmp / "files" / artifact).is_file()  # fetched once into the worker's store
    stablehlo = c.client.get(run["artifact_links"]["stablehlo"]).text
    assert "stablehlo.exponential" in stablehlo


@pytest.mark.gpu
def test_on_a_gpu_the_cpu_run_of_the_artifact_checks_the_output(tmp_path: Any) -> None:
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("no NVIDIA GPU in this process: the jax-gpu path cannot run here")
    from workers.files import FileCache
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    data, _ = export_function(scaled_softmax, [("float32", (64, 256))], ["cpu", "cuda"])
    files = FileCache(tmp_path)
    spec = {"workload": "exported", "path": "jax-gpu", "params": {"artifact": files.put(data)}}
    run = run_job(JobSpec.model_validate(spec), files_dir=tmp_path)
    assert run.correctness is not None and run.correctness.checked and run.correctness.passed
    assert run.correctness.reference == "the same artifact on the CPU, in float32"
    assert run.environment.platform == "gpu"
