"""A real server holding one run in every state, a comparison and a matrix, for page tests.

The local CPU worker that `boundary serve` starts does the real runs (done, compile-only,
the matrix). A second worker, played here through the HTTP worker API, claims a `jax-gpu`
platform: it holds one job (running, kept alive by heartbeats) and reports another as
failed. A `jax-tpu` job stays queued because no worker offers that path.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests import loopback
from workers.catalog import CATALOG_VERSION
from workers.protocol import PROTOCOL_VERSION

WORKER_TOKEN = "browser-suite-worker-token"
SMALL = {"m": 48, "n": 40, "k": 32}


def _job(path: str, stages: list[str] | None = None, samples: int = 12) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workload": "matmul",
        "path": path,
        "params": dict(SMALL),
        "measure": {"samples": samples},
    }
    if stages is not None:
        body["stages"] = stages
    return body


class PlayedWorker:
    """A GPU worker played through the worker API: it leases, heartbeats and fails jobs."""

    def __init__(self, url: str) -> None:
        self.http = loopback.Client(
            base_url=url + "/api/v1/worker",
            headers={"Authorization": f"Bearer {WORKER_TOKEN}"},
            timeout=30.0,
        )
        caps = {
            "platform": "gpu",
            "device_kind": "NVIDIA H200",
            "device_count": 1,
            "paths": ["jax-gpu"],
            "jax_version": "0.10.2",
            "protocol_version": PROTOCOL_VERSION,
            "catalog_version": CATALOG_VERSION,
        }
        r = self.http.post("/register", json={"capabilities": caps, "name": "played-gpu"})
        r.raise_for_status()
        self.id: str = r.json()["worker_id"]
        self.me = {"worker_id": self.id, "worker_key": r.json()["worker_key"]}
        self.held: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)

    def _lease_fields(self, grant: dict[str, Any]) -> dict[str, Any]:
        # Whatever binds a report to its lease (a lease id, in newer protocols) goes back.
        return {k: v for k, v in grant.items() if k not in ("spec", "requirements")}

    def lease(self) -> dict[str, Any]:
        r = self.http.post("/lease", json={**self.me, "wait_s": 10})
        assert r.status_code == 200, r.text
        grant: dict[str, Any] = r.json()
        return grant

    def fail(self, grant: dict[str, Any], reason: str) -> None:
        body = {
            **self._lease_fields(grant),
            **self.me,
            "failure": {"reason": reason, "stderr_tail": "RuntimeError: " + reason},
        }
        self.http.post("/result", json=body).raise_for_status()

    def hold(self, grant: dict[str, Any]) -> None:
        """Keep `grant` running (heartbeats) until `stop`."""
        self.held = grant
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(3.0):
            if self.held is None:
                continue
            body = {**self._lease_fields(self.held), **self.me}
            self.http.post("/heartbeat", json=body)

    def stop(self) -> None:
        self._stop.set()
        if self._beat.is_alive():
            self._beat.join(timeout=5)
        self.http.close()


@dataclass
class Site:
    """The seeded server: its URL and the ids of what it holds."""

    url: str
    runs: dict[str, str] = field(default_factory=dict)  # state -> job id
    compare: str = ""
    compare_targets: str = ""
    compare_options: str = ""
    matrix: str = ""
    played: PlayedWorker | None = None


def _submit(http: httpx.Client, body: dict[str, Any]) -> str:
    r = http.post("/api/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


FINAL = ("done", "failed", "expired", "cancelled")


def complete(job: dict[str, Any]) -> bool:
    """Whether a job is over, the follow-up that brings a compile's dumps included (the
    pages are read with them); AssertionError when either did not end done."""
    if job["status"] not in FINAL:
        return False
    assert job["status"] == "done", f"job {job['id']} ended {job['status']}: {job['reason']}"
    dumps = job.get("dumps")
    if dumps is None or dumps["status"] not in FINAL:
        return dumps is None
    assert dumps["status"] == "done", f"{dumps['job']} ended {dumps['status']}: {dumps['reason']}"
    return True


def _wait_final(http: httpx.Client, job_ids: list[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    pending = set(job_ids)
    while pending and time.monotonic() < deadline:
        for job_id in list(pending):
            if complete(http.get(f"/api/v1/jobs/{job_id}").json()):
                pending.discard(job_id)
        time.sleep(0.3)
    assert not pending, f"jobs not done in {timeout} s: {pending}"


def seed(url: str) -> Site:
    """Queue and drive every run state, a comparison and a matrix on the server at `url`."""
    site = Site(url=url)
    with loopback.Client(base_url=url, timeout=30.0) as http:
        done = _submit(http, _job("jax-cpu"))
        again = _submit(http, _job("jax-cpu"))
        compile_only = _submit(http, _job("jax-cpu", stages=["compile"]))
        # Compiled without the hardware by the local worker: a B200, a v6e slice (memory
        # fit, PTX, the target panel), and a CPU compile with XLA's pass pipeline.
        b200 = _submit(http, {**_job("jax-gpu"), "target": "b200:1"})
        v6e = _submit(http, {**_job("jax-tpu"), "target": "v6e:1x1"})
        pipeline = _submit(
            http, {**_job("jax-cpu", stages=["compile"]), "measure": {"pipeline": True}}
        )
        # What a new user met (issue 27): a B200 compile with one XLA option, to compare
        # with the plain one; a TPU program too big for its chip; a profiled run (its
        # timeline); twenty samples to plot on a phone.
        b200_options = _submit(
            http,
            {
                **_job("jax-gpu"),
                "target": "b200:1",
                "compiler_options": {"xla_gpu_enable_triton_gemm": False},
            },
        )
        misfit = _submit(
            http,
            {
                "workload": "attention",
                "path": "jax-tpu",
                "target": "v6e:1x1",
                "params": {"batch": 16, "heads": 32, "seq_len": 8192, "head_dim": 128},
            },
        )
        profiled = _submit(
            http, {**_job("jax-cpu", samples=20), "measure": {"samples": 20, "profile": True}}
        )
        matrix = http.post(
            "/api/v1/matrices",
            json={
                "workload": "matmul",
                "axis": {"name": "shape", "values": [SMALL, {"m": 64, "n": 64, "k": 64}]},
                "paths": ["jax-cpu", "jax-gpu"],
                "measure": {"samples": 5},
                "title": "small products",
            },
        )
        assert matrix.status_code == 201, matrix.text
        site.matrix = matrix.json()["id"]

        played = site.played = PlayedWorker(url)
        running = _submit(http, _job("jax-gpu"))
        # The matrix's jax-gpu cells were queued first: the played worker fails them all,
        # then holds the next one as the running run and fails one more for the failed run.
        grant = played.lease()
        while grant["job_id"] != running:
            played.fail(grant, "no GPU memory left on the played worker")
            grant = played.lease()
        played.hold(grant)
        failed = _submit(http, _job("jax-gpu"))
        second = PlayedWorker(url)
        try:
            second.fail(second.lease(), "CUDA_ERROR_OUT_OF_MEMORY while compiling")
        finally:
            second.stop()
        queued = _submit(http, _job("jax-tpu"))

        _wait_final(
            http, [done, again, compile_only, b200, v6e, pipeline, b200_options, misfit, profiled]
        )
        for job_id in (b200, v6e, pipeline):
            assert http.get(f"/api/v1/jobs/{job_id}").json()["status"] == "done", job_id
        cells = http.get(f"/matrices/{site.matrix}.json").json()
        cell_jobs = [c["job"] for r in cells["rows"] for c in r["cells"] if c.get("job")]
        local = [j for j in cell_jobs if http.get(f"/api/v1/jobs/{j}").json()["status"] != "failed"]
        _wait_final(http, local)
    site.runs = {
        "done": done,
        "compile-only": compile_only,
        "queued": queued,
        "running": running,
        "failed": failed,
        "b200": b200,
        "v6e": v6e,
        "pipeline": pipeline,
        "b200-options": b200_options,
        "misfit": misfit,
        "profiled": profiled,
    }
    site.compare = f"/compare?a={done}&b={again}"
    site.compare_targets = f"/compare?a={v6e}&b={b200}"
    site.compare_options = f"/compare?a={b200}&b={b200_options}"
    return site
