"""Dispatch overhead and job throughput with warm CPU workers, on SQLite and on
PostgreSQL with one replica and with two, side by side in one run.

Each deployment is real processes: servers (uvicorn, as `boundary serve` runs them) and
one worker process per server, on a fresh database, workers warmed up first. SQLite's
and PostgreSQL's deployments run at the same time and are measured in turn, job by job
and burst by burst, so a change of the machine's load hits both alike. Then:

1. Overhead: `--jobs` small matmul jobs one at a time on each (alternating), each after
   the previous one's run was stored. For each, (run stored − job created), from the
   store's own timestamps (the database's clock), minus the work the worker reports.
   Two subtractions:
   - the runner's wall time for `run_job` (everything not dispatch: the true overhead of
     queueing, lease wake-up, HTTP, runner IPC, result upload and storage), and
   - the stage and measurement intervals only (the literal "reported time"; this also
     counts the harness's own untimed work such as input creation and the check).
   Goal: median ≤ 50 ms; on PostgreSQL with one replica, ≤ 1.5× SQLite's.
2. Throughput: `--burst` compile-only 64³ jobs queued at once, jobs per minute from the
   first submission to the last stored run; `--rounds` rounds of SQLite, PostgreSQL with
   one replica's worker, and PostgreSQL with both replicas' workers (the burst split
   between the replicas; the second worker is started for these bursts and stopped
   after). Goal: two replicas with two workers ≥ 1.3× one replica with one.

    .venv/bin/python bench/dispatch.py [--jobs 50] [--burst 60]              # SQLite only
    .venv/bin/python bench/dispatch.py --db postgresql://user@host:5432/empty_db
    .venv/bin/python bench/dispatch.py --db postgresql    # a throwaway cluster (tests/pgcluster.py)

A PostgreSQL database given by URL must be empty (the bench refuses one that holds
jobs). The throwaway cluster runs with fsync on, as an operator's would.
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
    clients: list[httpx.Client] = field(default_factory=list)
    workers: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "BOUNDARY_DB": self.db,
            "BOUNDARY_WORKER_TOKEN": TOKEN,
            "BOUNDARY_CACHE_DIR": str(self.tmp / "jax-cache"),
            "BOUNDARY_FILES_DIR": str(self.tmp / "files"),
            "BOUNDARY_SUBMIT_RATE": "1000000",
            "BOUNDARY_MAX_QUEUE_PER_CLIENT": "100000",
            "BOUNDARY_MAX_QUEUE": "100000",
        }

    def add_replica(self) -> httpx.Client:
        """One more server and its worker, warmed up; a client of that server."""
        port = free_port()
        server = subprocess.Popen(
            [PY, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port),
             "--log-level", "warning"],
            cwd=ROOT, env=self.env(), stdout=self.logs, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.procs.append(server)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        wait_for(lambda: client.get("/readyz").status_code == 200, 60, "the server")
        self.clients.append(client)
        self.start_worker(len(self.clients) - 1)
        return client

    def start_worker(self, replica: int) -> None:
        """Start replica `replica`'s worker and warm it up."""
        client = self.clients[replica]

        def ids() -> set[str]:
            return {w["id"] for w in client.get("/api/v1/workers").json()["data"]}

        before = ids()
        command = [PY, "-m", "workers.cli.worker", "--server", str(client.base_url)]
        self.workers[replica] = subprocess.Popen(
            [*command, "--name", f"bench-{replica + 1}"],
            cwd=ROOT, env=self.env(), stdout=self.logs, stderr=subprocess.STDOUT,
        )  # fmt: skip
        (new,) = wait_for(lambda: ids() - before, 90, "a worker")
        self.warm(client, new)

    def stop_worker(self, replica: int) -> None:
        """Stop replica `replica`'s worker (it finishes what it holds, then exits)."""
        worker = self.workers.pop(replica)
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)

    def warm(self, client: httpx.Client, worker_id: str) -> None:
        """Queue jobs until worker `worker_id` has run three (the runner's first compiles
        are slow; on a shared queue another worker may take some of them)."""
        for _ in range(20):
            runs = [
                j for j in client.get("/api/v1/jobs", params={"limit": 500}).json()["data"]
                if j["worker_id"] == worker_id and j["status"] == "done"
            ]  # fmt: skip
            if len(runs) >= 3:
                return
            for spec in (SMALL, COMPILE_64):
                follow_until_final(client, client.post("/api/v1/jobs", json=spec).json()["id"])
        raise SystemExit(f"worker {worker_id} never got a job to warm up")

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
        procs = [*self.workers.values(), *reversed(self.procs)]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for client in self.clients:
            client.close()


def overhead(deployments: dict[str, Deployment], jobs: int) -> dict[str, float]:
    """Sequential jobs on each deployment in turn (through its first replica); prints each
    one's breakdown, returns each one's median dispatch overhead (s)."""
    ids: dict[str, list[str]] = {name: [] for name in deployments}
    observed: dict[str, list[float]] = {name: [] for name in deployments}
    for _ in range(jobs):
        for name, deployment in deployments.items():
            client = deployment.clients[0]
            started = time.perf_counter()
            job_id = client.post("/api/v1/jobs", json=SMALL).json()["id"]
            follow_until_final(client, job_id)
            observed[name].append(time.perf_counter() - started)
            ids[name].append(job_id)
    medians = {}
    print(f"{jobs} sequential jobs on each, in turn: {json.dumps(SMALL)}")
    for name, deployment in deployments.items():
        rows = deployment.timings(ids[name])
        over = [r["total"] - r["run_s"] for r in rows]
        print(f"  {name}")
        print("    submit → run stored (database clock) ", ms([r["total"] for r in rows]))
        print("    runner's run_job wall time           ", ms([r["run_s"] for r in rows]))
        print("    dispatch overhead (− run_job time)   ", ms(over))
        print(
            "    minus reported stage+sample time     ",
            ms([r["total"] - r["reported"] for r in rows]),
        )
        print("    client: POST → final SSE event       ", ms(observed[name]))
        medians[name] = statistics.median(over)
    return medians


def throughput(deployment: Deployment, clients: list[httpx.Client], burst: int) -> float:
    """`burst` compile-only jobs queued at once, spread over `clients`; jobs/min."""
    ids = [
        clients[i % len(clients)].post("/api/v1/jobs", json=COMPILE_64).json()["id"]
        for i in range(burst)
    ]
    wait_for(lambda: len(deployment.timings(ids)) == len(ids), 600, "the burst")
    rows = deployment.timings(ids)
    span = max(r["stored"] for r in rows) - min(r["created"] for r in rows)
    return burst / span * 60


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
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--db",
        help="also bench PostgreSQL: an empty database's postgresql:// URL, or 'postgresql' "
        "for a throwaway cluster",
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="boundary-bench-"))
    logs = open(tmp / "processes.log", "wb")  # noqa: SIM115 - closed in finally
    print(f"nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at the start")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        stack.callback(logs.close)
        deployments = {"SQLite": Deployment(str(tmp / "bench.sqlite3"), tmp, logs)}
        stack.callback(deployments["SQLite"].close)
        if args.db:
            url = stack.enter_context(postgres(args.db))
            deployments["PostgreSQL"] = Deployment(url, tmp, logs)
            stack.callback(deployments["PostgreSQL"].close)
        for deployment in deployments.values():
            deployment.add_replica()
        over = overhead(deployments, args.jobs)
        per_min: dict[str, list[float]] = {}
        pg = deployments.get("PostgreSQL")
        for _ in range(args.rounds):
            for name, deployment in deployments.items():
                per_min.setdefault(name, []).append(
                    throughput(deployment, deployment.clients[:1], args.burst)
                )
            if pg is not None:  # the same burst over two replicas, each with its worker
                if len(pg.clients) < 2:
                    pg.add_replica()
                else:
                    pg.start_worker(1)
                two = throughput(pg, pg.clients, args.burst)
                per_min.setdefault("PostgreSQL, two replicas", []).append(two)
                pg.stop_worker(1)
        print(
            f"throughput: {args.burst} compile-only 64³ jobs queued at once, {args.rounds} rounds"
        )
        for name, values in per_min.items():
            shown = ", ".join(f"{v:.0f}" for v in values)
            print(f"  {name:26s} median {statistics.median(values):6.0f} jobs/min ({shown})")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if pg is not None:
        one, two = (
            statistics.median(per_min["PostgreSQL"]),
            statistics.median(per_min["PostgreSQL, two replicas"]),
        )
        print("ratios:")
        for what, ratio, goal in (
            ("dispatch overhead, PostgreSQL one replica / SQLite",
             over["PostgreSQL"] / over["SQLite"], " (goal ≤ 1.5×)"),
            ("jobs/min, PostgreSQL one replica / SQLite",
             one / statistics.median(per_min["SQLite"]), ""),
            ("jobs/min, PostgreSQL two replicas / one replica", two / one, " (goal ≥ 1.3×)"),
        ):  # fmt: skip
            print(f"  {what}: {ratio:.2f}×{goal}")


if __name__ == "__main__":
    main()
