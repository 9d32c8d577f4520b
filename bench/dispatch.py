"""Dispatch overhead and job throughput with one warm local CPU worker.

Starts a server (uvicorn, as `boundary serve` runs it) and one worker process on a
fresh database, warms the worker up, then:

1. Overhead: submits `--jobs` small matmul jobs one at a time, each after the previous
   one's run was stored. For each, (run stored − job created), read from the store's own
   timestamps, minus the work the worker reports. Two subtractions are printed:
   - the runner's wall time for `run_job` (everything not dispatch: the true overhead of
     queueing, lease wake-up, HTTP, runner IPC, result upload and storage), and
   - the stage and measurement intervals only (the literal "reported time"; this also
     counts the harness's own untimed work such as input creation and the check).
   Goal: median ≤ 50 ms.
2. Throughput: submits `--burst` jobs at once and reports jobs per minute from the
   first submission to the last stored run.

    .venv/bin/python bench/dispatch.py [--jobs 50] [--burst 60]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TOKEN = "bench-worker-token-0123"
SMALL: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64, "dtype": "float32"},
    "measure": {"samples": 5},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = probe()
        except httpx.TransportError:
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def follow_until_final(client: httpx.Client, job_id: str) -> None:
    """Block on the job's event stream until it reports a final status."""
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events", timeout=120) as r:
        event = ""
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "status":
                status = json.loads(line.split(":", 1)[1])["status"]
                if status in ("done", "failed", "expired", "cancelled"):
                    if status != "done":
                        raise SystemExit(f"job {job_id} {status}")
                    return


def reported_seconds(result: dict[str, Any]) -> float:
    stages = result.get("stage_seconds") or {}
    total = sum(v for v in stages.values() if v)
    for m in result.get("measurements") or []:
        total += sum(m["samples_s"]) * m.get("calls_per_sample", 1)
    return float(total)


def timings(db: Path, job_ids: list[str]) -> list[dict[str, float]]:
    marks = ",".join("?" for _ in job_ids)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT j.created_at, r.created_at, r.run_s, r.result FROM jobs j "
            f"JOIN runs r ON r.job_id = j.id WHERE j.id IN ({marks})",
            job_ids,
        ).fetchall()
    return [
        {
            "created": created,
            "stored": stored,
            "total": stored - created,
            "run_s": run_s,
            "reported": reported_seconds(json.loads(result)),
        }
        for created, stored, run_s, result in rows
    ]


def ms(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return (
        f"median {statistics.median(values) * 1e3:7.1f} ms   "
        f"p10 {q[0] * 1e3:7.1f}   p90 {q[-1] * 1e3:7.1f}   (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--burst", type=int, default=60)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="boundary-bench-"))
    db = tmp / "bench.sqlite3"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "BOUNDARY_DB": str(db),
        "BOUNDARY_WORKER_TOKEN": TOKEN,
        "BOUNDARY_CACHE_DIR": str(tmp / "jax-cache"),
        "BOUNDARY_SUBMIT_RATE": "1000000",
    }
    logs = open(tmp / "processes.log", "wb")  # noqa: SIM115 - closed in finally
    server = subprocess.Popen(
        [PY, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=logs, stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker: subprocess.Popen[bytes] | None = None
    client = httpx.Client(base_url=url, timeout=30)
    try:
        wait_for(lambda: client.get("/readyz").status_code == 200, 30, "the server")
        worker = subprocess.Popen(
            [PY, "-m", "workers.cli.worker", "--server", url, "--name", "bench"],
            cwd=ROOT, env=env, stdout=logs, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for(lambda: client.get("/api/v1/workers").json()["count"], 60, "the worker")
        for _ in range(3):  # warm-up: the runner's first compiles are slow
            follow_until_final(client, client.post("/api/v1/jobs", json=SMALL).json()["id"])

        ids: list[str] = []
        observed: list[float] = []
        for _ in range(args.jobs):
            started = time.perf_counter()
            job_id = client.post("/api/v1/jobs", json=SMALL).json()["id"]
            follow_until_final(client, job_id)
            observed.append(time.perf_counter() - started)
            ids.append(job_id)
        rows = timings(db, ids)
        print(f"{args.jobs} sequential jobs: {json.dumps(SMALL)}")
        print("  submit → run stored (server clock)   ", ms([r["total"] for r in rows]))
        print("  runner's run_job wall time           ", ms([r["run_s"] for r in rows]))
        print(
            "  dispatch overhead (− run_job time)   ",
            ms([r["total"] - r["run_s"] for r in rows]),
        )
        print(
            "  minus reported stage+sample time     ",
            ms([r["total"] - r["reported"] for r in rows]),
        )
        print("  client: POST → final SSE event       ", ms(observed))

        burst: list[str] = []
        for _ in range(args.burst):
            burst.append(client.post("/api/v1/jobs", json=SMALL).json()["id"])
        follow_until_final(client, burst[-1])
        wait_for(lambda: len(timings(db, burst)) == len(burst), 120, "the burst")
        rows = timings(db, burst)
        span = max(r["stored"] for r in rows) - min(r["created"] for r in rows)
        print(
            f"throughput, {args.burst} jobs queued at once, one worker: "
            f"{args.burst / span * 60:.0f} jobs/min ({span:.2f} s; "
            f"median run_job {statistics.median(r['run_s'] for r in rows) * 1e3:.1f} ms)"
        )
    finally:
        client.close()
        for proc in (worker, server):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        logs.close()


if __name__ == "__main__":
    main()
