"""Clients take turns at the workers: one client's queued fit searches against another
client's single job, on a real server with its real local worker.

`boundary serve --workers 1` on a fresh SQLite store (its local CPU worker compiles for
GPU and TPU targets without the hardware). Client A (from 127.0.0.1) queues 16 fit
searches of four targets each: 128 seed probes, every one a real compile. Once A's
probes are running, client B (from 127.0.0.2, another client to admission) queues one
compile-only job, `--rounds` times, each once the previous one has ended. For each of
B's jobs, from the store's own times (the database's clock):

- its wait: from its queueing to its lease;
- A's probes running and queued at that moment;
- how many of A's probes queued at that moment were leased before it (the claim: none;
  B waits only for the probes already running);
- the wait first-in, first-out would have meant: A's probes queued at that moment, each
  at the median probe's compile, spread over the workers.

    .venv/bin/python bench/fair_queue.py [--fits 16] [--rounds 3] [--workers 1]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store import Store  # noqa: E402

TARGETS = ("h100:1", "h200:1", "b200:1", "v6e:1x1")
SEARCH: dict[str, Any] = {
    "workload": "attention",
    "params": {"heads": 8, "seq_len": 1024, "head_dim": 64},
    "dimension": "batch",
    "range": [1, 256],
}
B_JOB: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-gpu",
    "target": "h100:1",
    "params": {"m": 512, "n": 512, "k": 512},
    "stages": ["compile"],
    "dumps": "none",  # no follow-up job of B's own to wait behind
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def client_from(address: str, base: str) -> httpx.Client:
    """A client of the server whose connections come from `address` (a client of its own)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(transport=transport, base_url=base, timeout=30.0)


def start_server(tmp: Path, port: int, workers: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "BOUNDARY_DB": str(tmp / "store.sqlite3"),
        "BOUNDARY_CACHE_DIR": str(tmp / "jax-cache"),
        # A's 128 probes in one go: the rate and the share are admission's, not measured here.
        "BOUNDARY_SUBMIT_RATE": "10000",
        "BOUNDARY_MAX_QUEUE_PER_CLIENT": "1000",
    }
    log = (tmp / "serve.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port),
         "--workers", str(workers)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def leased_at(store: Store, job_id: str) -> float | None:
    return next((at for status, at, _ in store.job_events(job_id) if status == "running"), None)


def probe_jobs(store: Store, fit_ids: list[str]) -> list[str]:
    return [p.job_id for f in fit_ids for p in store.fit_probes(f) if p.job_id]


def one_round(store: Store, a_fits: list[str], b: httpx.Client, workers: int) -> dict[str, float]:
    """B queues one job while A's probes run and wait; what its wait was, and A's queue."""
    r = b.post("/api/v1/jobs", json=B_JOB)
    r.raise_for_status()
    job_id = r.json()["id"]
    job = store.get_job(job_id)
    assert job is not None
    queued_at = job.created_at
    wait_for(lambda: leased_at(store, job_id), 600, "B's job to be leased")
    b_leased = leased_at(store, job_id)
    assert b_leased is not None
    running = queued = overtook = 0
    for probe in probe_jobs(store, a_fits):
        events = store.job_events(probe)
        created = events[0][1]
        started = leased_at(store, probe)
        ended = next((at for s, at, _ in events if s in ("done", "failed", "cancelled")), None)
        if created > queued_at or (ended is not None and ended <= queued_at):
            continue  # queued after B's job, or over before it
        if started is not None and started <= queued_at:
            running += 1
        else:
            queued += 1
            overtook += started is not None and started < b_leased
    wait_for(lambda: (store.get_job(job_id) or job).status.value != "running", 600, "B's job")
    return {
        "wait_s": b_leased - queued_at,
        "running": running,
        "queued": queued,
        "overtook": overtook,
        "workers": workers,
    }


def probe_seconds(store: Store, a_fits: list[str]) -> list[float]:
    """Each finished probe's time from lease to its end."""
    out = []
    for probe in probe_jobs(store, a_fits):
        events = store.job_events(probe)
        started = leased_at(store, probe)
        ended = next((at for s, at, _ in events if s == "done"), None)
        if started is not None and ended is not None:
            out.append(ended - started)
    return out


def measure(args: argparse.Namespace, tmp: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(tmp, port, args.workers)
    try:
        a, b = client_from("127.0.0.1", base), client_from("127.0.0.2", base)

        def compiling_workers() -> list[dict[str, Any]]:
            try:
                found = a.get("/api/v1/workers")
            except httpx.TransportError:  # not listening yet
                return []
            data = found.json()["data"] if found.status_code == 200 else []
            return [w for w in data if set(TARGETS) <= set(w.get("targets") or [])]

        wait_for(lambda: len(compiling_workers()) >= args.workers, 300, "the local workers")
        store = Store.open(tmp / "store.sqlite3")
        a_fits = []
        for _ in range(args.fits):
            r = a.post("/api/v1/fits", json={**SEARCH, "targets": list(TARGETS)})
            r.raise_for_status()
            a_fits.append(r.json()["id"])
        wait_for(lambda: store.count_by_status().get("running"), 120, "A's first probe")
        rounds = [one_round(store, a_fits, b, args.workers) for _ in range(args.rounds)]
        seconds = probe_seconds(store, a_fits)
        for fit_id in a_fits:
            a.post(f"/api/v1/fits/{fit_id}/cancel")
        report(rounds, seconds)
    finally:
        server.terminate()
        server.wait(timeout=60)


def report(rounds: list[dict[str, float]], seconds: list[float]) -> None:
    median = statistics.median(seconds)
    print(f"A's probes: {len(seconds)} compiled, median {median:.2f} s each (lease to end)")
    print("round  B waited  A running  A queued  A's queued leased first  FIFO would wait")
    for i, r in enumerate(rounds, 1):
        fifo = r["queued"] * median / r["workers"]
        print(
            f"{i:>5}  {r['wait_s']:>6.2f} s  {r['running']:>9}  {r['queued']:>8}  "
            f"{r['overtook']:>23}  ≥ {fifo:.0f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=16, help="client A's fit searches")
    parser.add_argument("--rounds", type=int, default=3, help="client B's jobs, one at a time")
    parser.add_argument("--workers", type=int, default=1, help="the server's local workers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fair-queue-") as tmp:
        measure(args, Path(tmp))


if __name__ == "__main__":
    main()
