"""Dispatch overhead and job throughput with warm CPU workers, on SQLite and on
PostgreSQL with one replica and with two, side by side in one run.

Each deployment is real processes: servers (uvicorn, as `boundary serve` runs them) and
one worker process per server, on a fresh database, workers warmed up first. Then:

1. Overhead: `--jobs` small matmul jobs one at a time, each after the previous one's run
   was stored. For each, (run stored − job created), from the store's own timestamps
   (the database's clock), minus the work the worker reports. Two subtractions:
   - the runner's wall time for `run_job` (everything not dispatch: the true overhead of
     queueing, lease wake-up, HTTP, runner IPC, result upload and storage), and
   - the stage and measurement intervals only (the literal "reported time"; this also
     counts the harness's own untimed work such as input creation and the check).
   Goal: median ≤ 50 ms; on PostgreSQL with one replica, ≤ 1.5× SQLite's.
2. Throughput: `--burst` compile-only 64³ jobs queued at once (split between the
   replicas), jobs per minute from the first submission to the last stored run. Goal:
   two replicas with two workers ≥ 1.3× one replica with one.

    .venv/bin/python bench/dispatch.py [--jobs 50] [--burst 60]              # SQLite only
    .venv/bin/python bench/dispatch.py --db postgresql://user@host:5432/empty_db
    .venv/bin/python bench/dispatch.py --db postgresql    # a throwaway cluster (tests/pgcluster.py)

A PostgreSQL database given by URL must be empty (the bench refuses one that holds a
Boundary schema). The throwaway cluster runs with fsync on, as an operator's would.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.store import Store  # noqa: E402

PY = sys.executable
TOKEN = "bench-worker-token-0123"
SMALL: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64, "dtype": "float32"},
    "measure": {"samples": 5},
}
COMPILE_64: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64, "dtype": "float32"},
    "stages": ["compile"],
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


def ms(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return (
        f"median {statistics.median(values) * 1e3:7.1f} ms   "
        f"p10 {q[0] * 1e3:7.1f}   p90 {q[-1] * 1e3:7.1f}   (n={len(values)})"
    )


@dataclass
class Deployment:
    """Servers on one database, each with one worker process, stopped by `close`."""

    db: str
    tmp: Path
    logs: Any
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "BOUNDARY_DB": self.db,
            "BOUNDARY_WORKER_TOKEN": TOKEN,
            "BOUNDARY_CACHE_DIR": str(self.tmp / "jax-cache"),
            "BOUNDARY_SUBMIT_RATE": "1000000",
            "BOUNDARY_MAX_QUEUE_PER_CLIENT": "100000",
            "BOUNDARY_MAX_QUEUE": "100000",
        }

    def add_replica(self) -> httpx.Client:
        """One more server and its worker, warmed up; a client of that server."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [PY, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port),
             "--log-level", "warning"],
            cwd=ROOT, env=self.env(), stdout=self.logs, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.procs.append(server)
        client = httpx.Client(base_url=url, timeout=30)
        wait_for(lambda: client.get("/readyz").status_code == 200, 60, "the server")
        before = client.get("/api/v1/workers").json()["count"]
        name = f"bench-{len(self.urls) + 1}"
        worker = [PY, "-m", "workers.cli.worker", "--server", url, "--name", name]
        self.procs.append(
            subprocess.Popen(
                worker, cwd=ROOT, env=self.env(), stdout=self.logs, stderr=subprocess.STDOUT
            )
        )
        wait_for(lambda: client.get("/api/v1/workers").json()["count"] > before, 90, "a worker")
        self.urls.append(url)
        self.warm(client, name)
        return client

    def warm(self, client: httpx.Client, name: str) -> None:
        """Queue jobs until worker `name` has run three (the runner's first compiles are
        slow; on a shared queue another worker may take some of them)."""
        for _ in range(20):
            runs = [
                j for j in client.get("/api/v1/jobs", params={"limit": 500}).json()["data"]
                if j["worker_name"] == name and j["status"] == "done"
            ]  # fmt: skip
            if len(runs) >= 3:
                return
            for spec in (SMALL, COMPILE_64):
                follow_until_final(client, client.post("/api/v1/jobs", json=spec).json()["id"])
        raise SystemExit(f"worker {name} never got a job to warm up")

    def timings(self, job_ids: list[str]) -> list[dict[str, float]]:
        marks = ",".join("?" for _ in job_ids)
        store = Store.open(self.db)
        try:
            rows = store.backend.execute(
                "SELECT j.created_at, r.created_at, r.run_s, r.result FROM jobs j "
                f"JOIN runs r ON r.job_id = j.id WHERE j.id IN ({marks})",
                job_ids,
            )
        finally:
            store.close()
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

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def overhead(deployment: Deployment, client: httpx.Client, jobs: int) -> float:
    """Sequential jobs; prints the breakdown, returns the median dispatch overhead (s)."""
    ids: list[str] = []
    observed: list[float] = []
    for _ in range(jobs):
        started = time.perf_counter()
        job_id = client.post("/api/v1/jobs", json=SMALL).json()["id"]
        follow_until_final(client, job_id)
        observed.append(time.perf_counter() - started)
        ids.append(job_id)
    rows = deployment.timings(ids)
    print(f"  {jobs} sequential jobs: {json.dumps(SMALL)}")
    print("    submit → run stored (database clock) ", ms([r["total"] for r in rows]))
    print("    runner's run_job wall time           ", ms([r["run_s"] for r in rows]))
    print("    dispatch overhead (− run_job time)   ", ms([r["total"] - r["run_s"] for r in rows]))
    print(
        "    minus reported stage+sample time     ", ms([r["total"] - r["reported"] for r in rows])
    )
    print("    client: POST → final SSE event       ", ms(observed))
    return statistics.median(r["total"] - r["run_s"] for r in rows)


def throughput(deployment: Deployment, clients: list[httpx.Client], burst: int) -> float:
    """`burst` compile-only jobs queued at once, spread over the replicas; jobs/min."""
    ids = [
        clients[i % len(clients)].post("/api/v1/jobs", json=COMPILE_64).json()["id"]
        for i in range(burst)
    ]
    wait_for(lambda: len(deployment.timings(ids)) == len(ids), 600, "the burst")
    rows = deployment.timings(ids)
    span = max(r["stored"] for r in rows) - min(r["created"] for r in rows)
    per_min = burst / span * 60
    print(
        f"  throughput, {burst} compile-only 64³ jobs queued at once, {len(clients)} "
        f"replica(s) with one worker each: {per_min:.0f} jobs/min ({span:.2f} s; median "
        f"run_job {statistics.median(r['run_s'] for r in rows) * 1e3:.1f} ms)"
    )
    return per_min


def measure(
    deployment: Deployment, clients: list[httpx.Client], jobs: int, burst: int
) -> dict[str, float]:
    """The overhead through the first client (when `jobs`), and the throughput."""
    out = {"overhead": overhead(deployment, clients[0], jobs)} if jobs else {}
    return out | {"per_min": throughput(deployment, clients, burst)}


@contextlib.contextmanager
def postgres(db: str) -> Iterator[str]:
    """The URL to bench on: `db` itself (it must be empty), or a throwaway cluster."""
    if db != "postgresql":
        store = Store.open(db)  # (refuses a newer schema; an older one would be upgraded)
        try:
            used = store.backend.execute("SELECT count(*) FROM jobs")[0][0]
        finally:
            store.close()
        if used:
            raise SystemExit(f"--db: the database holds {used} jobs; give an empty one")
        yield db
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from pgcluster import running_cluster

    with running_cluster(durable=True) as cluster:
        print(f"(a throwaway PostgreSQL cluster, fsync on, started in {cluster.start_s:.1f} s)")
        yield cluster.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--burst", type=int, default=60)
    parser.add_argument(
        "--db",
        help="also bench PostgreSQL: an empty database's postgresql:// URL, or 'postgresql' "
        "for a throwaway cluster",
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="boundary-bench-"))
    logs = open(tmp / "processes.log", "wb")  # noqa: SIM115 - closed in finally
    results: dict[str, dict[str, float]] = {}
    print(f"nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at the start")
    try:
        lite = Deployment(str(tmp / "bench.sqlite3"), tmp, logs)
        try:
            print("SQLite, one server, one worker")
            results["sqlite"] = measure(lite, [lite.add_replica()], args.jobs, args.burst)
        finally:
            lite.close()
        if args.db:
            with postgres(args.db) as url:
                pg = Deployment(url, tmp, logs)
                try:
                    print("PostgreSQL, one replica, one worker")
                    first = pg.add_replica()
                    results["pg1"] = measure(pg, [first], args.jobs, args.burst)
                    print("PostgreSQL, two replicas, one worker each")
                    both = [first, pg.add_replica()]
                    results["pg2"] = measure(pg, both, 0, args.burst)
                finally:
                    pg.close()
    finally:
        logs.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if "pg1" in results:
        lite_r, one, two = results["sqlite"], results["pg1"], results["pg2"]
        print("ratios:")
        for what, ratio, goal in (
            ("dispatch overhead, PostgreSQL one replica / SQLite",
             one["overhead"] / lite_r["overhead"], " (goal ≤ 1.5×)"),
            ("jobs/min, PostgreSQL one replica / SQLite", one["per_min"] / lite_r["per_min"], ""),
            ("jobs/min, PostgreSQL two replicas / one replica",
             two["per_min"] / one["per_min"], " (goal ≥ 1.3×)"),
        ):  # fmt: skip
            print(f"  {what}: {ratio:.2f}×{goal}")


if __name__ == "__main__":
    main()
