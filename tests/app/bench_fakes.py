"""A worker played by the test through the worker API, and a run result to post."""

from __future__ import annotations

from typing import Any

import httpx

from workers.catalog import CATALOG_VERSION, parse_params
from workers.catalog.kernels import public_params
from workers.catalog.target_rules import apply_target
from workers.protocol import PROTOCOL_VERSION, JobSpec

WORKER_TOKEN = "test-worker-token"  # the token of the bench_settings fixture
AUTH = {"Authorization": f"Bearer {WORKER_TOKEN}"}

MATMUL: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64},
    "measure": {"samples": 5},
}


DEVICE_KINDS = {"cpu": "cpu", "gpu": "NVIDIA H200", "tpu": "TPU v6 lite"}
"""The device kind a fake worker of each platform registers, and its runs report."""


def environment_of(job: JobSpec) -> dict[str, Any]:
    """The environment a run of `job` reports on a fake worker of the job's platform: the
    host's CPU for a target compiled without the hardware."""
    ran = {"execute", "scale"} & {s.value for s in job.stages}
    platform = {"jax-gpu": "gpu", "cuda": "gpu", "jax-tpu": "tpu"}.get(job.path.value, "cpu")
    if job.target is not None and not ran:
        platform = "cpu"
    return {
        "platform": platform,
        "device_kind": DEVICE_KINDS[platform],
        "device_count": 1,
        "jax_version": "0.10.2",
        "jaxlib_version": "0.10.2",
        "timestamp": "2026-11-01T00:00:00+00:00",
    }


def capabilities(platform: str = "cpu", **changes: Any) -> dict[str, Any]:
    path = {"cpu": "jax-cpu", "gpu": "jax-gpu", "tpu": "jax-tpu"}[platform]
    caps = {
        "platform": platform,
        "device_kind": DEVICE_KINDS[platform],
        "device_count": 1,
        "max_virtual_devices": 8 if platform == "cpu" else 0,
        "paths": [path],
        "jax_version": "0.10.2",
        "cuda_compile": False,
        "cuda_run": False,
        "protocol_version": PROTOCOL_VERSION,
        "catalog_version": CATALOG_VERSION,
    }
    caps.update(changes)
    return caps


def run_result(spec: dict[str, Any], hlo: str = "HloModule m\n") -> dict[str, Any]:
    """A plausible RunResult for `spec` (as a worker would post it: the job as its runner
    saw it and the parameters after validation and defaults, which the server checks)."""
    job = apply_target(JobSpec.model_validate(spec))
    return {
        "job": job.model_dump(mode="json"),
        "params": public_params(parse_params(job.workload, job.params), job.path.value),
        "stage_seconds": {"trace": 0.001, "lower": 0.004, "compile": 0.01},
        "artifacts": {"jaxpr": "{ lambda ; a b. }", "stablehlo": "module {}", "hlo": hlo},
        "measurements": [
            {"boundary": "host-sync", "samples_s": [0.001, 0.002, 0.0015], "stats": None}
        ],
        "correctness": {"passed": True, "error": 1e-7, "tolerance": 1e-5},
        "environment": environment_of(job),
        "valid": True,
    }


class FakeWorker:
    """Registers, leases and reports through the HTTP worker API."""

    def __init__(self, client: httpx.AsyncClient, caps: dict[str, Any] | None = None) -> None:
        self.client = client
        self.caps = caps or capabilities()
        self.id = ""
        self.key = ""  # sent with every message that names a worker
        self.leases: dict[str, str] = {}  # job id -> the lease id its grant carried

    async def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST to the worker API; a report on a job this worker leased carries its lease."""
        job_id = body.get("job_id")
        if isinstance(job_id, str) and job_id in self.leases and "lease_id" not in body:
            body = {**body, "lease_id": self.leases[job_id]}
        if "worker_id" in body and "worker_key" not in body and self.key:
            body = {**body, "worker_key": self.key}
        r = await self.client.post(f"/api/v1/worker/{path}", json=body, headers=AUTH)
        if path == "register" and r.status_code == 200:
            self.key = r.json()["worker_key"]
        return r

    async def register(self) -> dict[str, Any]:
        r = await self.post("register", {"capabilities": self.caps, "name": "fake"})
        assert r.status_code == 200, r.text
        reply: dict[str, Any] = r.json()
        self.id = reply["worker_id"]
        self.key = reply["worker_key"]
        return reply

    async def lease(self, wait_s: float = 0.0) -> dict[str, Any] | None:
        r = await self.post("lease", {"worker_id": self.id, "wait_s": wait_s})
        if r.status_code == 204:
            return None
        assert r.status_code == 200, r.text
        grant: dict[str, Any] = r.json()
        self.leases[grant["job_id"]] = grant["lease_id"]
        return grant

    async def heartbeat(self, job_id: str | None) -> dict[str, Any]:
        r = await self.post("heartbeat", {"worker_id": self.id, "job_id": job_id})
        assert r.status_code in (200, 409), r.text  # 409: the lease has ended
        reply: dict[str, Any] = r.json()
        return reply

    async def finish(self, grant: dict[str, Any], **result_changes: Any) -> httpx.Response:
        result = run_result(grant["spec"]) | result_changes
        body = {
            "worker_id": self.id,
            "job_id": grant["job_id"],
            "attempt": grant["attempt"],
            "result": result,
            "run_seconds": 0.05,
        }
        return await self.post("result", body)

    async def fail(
        self, job_id: str, reason: str, stderr_tail: str | None = None
    ) -> httpx.Response:
        failure = {"reason": reason, "stderr_tail": stderr_tail}
        return await self.post(
            "result", {"worker_id": self.id, "job_id": job_id, "failure": failure}
        )
