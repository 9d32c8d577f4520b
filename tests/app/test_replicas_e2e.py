"""Several `boundary serve` replicas on one PostgreSQL, as an operator runs them: real
server processes, each with its own local worker (and its own generated worker token),
behind no balancer at all: a client talks to either.

- Two replicas, one killed: 40 jobs, 20 through each; replica A and its worker are
  SIGKILLed while A's worker holds a lease; every job ends done exactly once, and the
  survivor and a restarted A read the same jobs. (It was 100 jobs: 40 are as sharp, since
  A is frozen to make sure the kill lands on a held lease, both workers lease from the one
  queue throughout, and exactly-once is checked for every job.)
- A client's quota is shared, and an upload through one replica runs on the other's worker.
- A run's live page on B shows the progress of a job whose worker reports to A.
- /readyz says not ready while the database is unreachable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jax
import psycopg
import pytest
from pgcluster import running_cluster

from tests import loopback
from tests.app.test_serve_e2e import wait_for as waited
from tests.browser.conftest import free_port, wait_until_up
from workers.cli.export_fn import export_function

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COMPILE_64: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64},
    "stages": ["compile"],
}
FINAL = {"done", "failed", "expired", "cancelled"}
JOBS_EACH = 20
"""Jobs submitted through each replica in the kill test."""


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """`predicate()` once it is truthy (asked every 0.1 s); fails after `timeout`."""
    found: list[Any] = []

    def probe() -> bool:
        found.append(predicate())
        return bool(found[-1])

    assert waited(probe, timeout), f"timed out waiting for {what}"
    return found[-1]


class Replica:
    """One `boundary serve` process (and its local workers) in a process group of its own."""

    def __init__(self, tmp: Path, name: str, db: str, workers: int, **settings: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name, self.workers = name, workers
        env = {k: v for k, v in os.environ.items() if k != "BOUNDARY_WORKER_TOKEN"}
        chosen = {"SUBMIT_RATE": "100000", "MAX_QUEUE_PER_CLIENT": "1000", **settings}
        env.update({f"BOUNDARY_{k}": v for k, v in chosen.items()})
        env.update(
            BOUNDARY_DB=db, BOUNDARY_CACHE_DIR=str(tmp / f"cache-{name}"), PYTHONPATH=str(ROOT)
        )
        self.env = env
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = loopback.Client(base_url=self.url, timeout=30)

    def start(self, workers: int | None = None) -> Replica:
        command = [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port)]
        count = self.workers if workers is None else workers
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--workers", str(count)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its workers share its process group
            )
        wait_until_up(self.url, self.proc, timeout=60)
        wait_for(lambda: self.client.get("/readyz").status_code == 200, 60, f"{self.name} ready")
        return self

    def kill(self) -> None:
        """SIGKILL the server and every process it started (its workers, their runners)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def send_signal(self, signum: signal.Signals) -> None:
        """Send `signum` to the server and every process it started."""
        assert self.proc is not None and self.proc.poll() is None
        os.killpg(self.proc.pid, signum)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.client.close()

    def submit(self, spec: dict[str, Any], **headers: str) -> httpx.Response:
        return self.client.post("/api/v1/jobs", json=spec, headers=headers)

    def job(self, job_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.client.get(f"/api/v1/jobs/{job_id}").json()
        return body


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def make(name: str, workers: int = 1, **settings: str) -> Replica:
        replica = Replica(tmp_path, name, pg_url, workers, **settings)
        started.append(replica)
        return replica.start()

    yield make
    for replica in started:
        replica.stop()


def registered_workers(db: str) -> list[str]:
    with psycopg.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM workers ORDER BY registered_at")]


def test_two_replicas_one_killed_every_job_runs_exactly_once(
    replicas: Callable[..., Replica], pg_url: str
) -> None:
    a = replicas("a", LEASE_S="3")
    (worker_a,) = wait_for(lambda: registered_workers(pg_url), 90, "a's worker")
    b = replicas("b", LEASE_S="3")
    wait_for(lambda: len(registered_workers(pg_url)) == 2, 90, "b's worker")
    # Every replica lists every worker, whichever it registered with.
    assert a.client.get("/api/v1/workers").json()["count"] == 2
    assert b.client.get("/api/v1/workers").json()["count"] == 2

    ids = [a.submit(COMPILE_64).json()["id"] for _ in range(JOBS_EACH)]
    ids += [b.submit(COMPILE_64).json()["id"] for _ in range(JOBS_EACH)]
    assert len(set(ids)) == 2 * JOBS_EACH

    def a_holds_a_lease() -> bool:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM jobs WHERE status = 'running' AND lease_owner = %s",
                (worker_a,),
            ).fetchone()
        return bool(row and row[0])

    def held_by_a() -> list[str]:
        with psycopg.connect(pg_url) as conn:
            return [r[0] for r in conn.execute(
                "SELECT id FROM jobs WHERE status = 'running' AND lease_owner = %s", (worker_a,)
            )]  # fmt: skip

    # Killed mid-job: a's whole process group is frozen (SIGSTOP) while the database is
    # asked what it holds, so the job cannot end between the look and the kill (it did
    # once: a compile of 64³ takes milliseconds); if it held nothing at that instant, it
    # runs on and is asked again.
    held: list[str] = []
    for _ in range(50):
        wait_for(a_holds_a_lease, 60, "a's worker to hold a lease")
        a.send_signal(signal.SIGSTOP)
        held = held_by_a()
        if held:
            break
        a.send_signal(signal.SIGCONT)
    assert held, "a's worker never held a lease at the instant it was frozen"
    a.kill()  # its lease must expire and the job run again on b

    def all_final() -> bool:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM jobs WHERE status IN ('done', 'failed', 'expired', "
                "'cancelled')"
            ).fetchone()
        return bool(row and row[0] == 2 * JOBS_EACH)

    wait_for(all_final, 600, "every job to end")
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT j.id, j.status, j.attempts, count(r.id), min(r.attempt), max(r.attempt), "
            "(SELECT count(*) FROM job_events e WHERE e.job_id = j.id AND e.status = 'done') "
            "FROM jobs j LEFT JOIN runs r ON r.job_id = j.id GROUP BY j.id"
        ).fetchall()
        expired = {
            r[0]
            for r in conn.execute(
                "SELECT job_id FROM job_events WHERE detail = %s",
                (f"lease expired on worker {worker_a}",),
            )
        }
    assert len(rows) == 2 * JOBS_EACH
    for job_id, status, attempts, runs, first, last, done_events in rows:
        assert (status, runs, done_events) == ("done", 1, 1), job_id
        assert first == last == attempts, job_id  # the run's attempt is the server's count
    attempts = {r[0]: r[2] for r in rows}
    for job_id in held:  # a's job ran again on b, once, as its second attempt
        assert attempts[job_id] == 2 and job_id in expired

    a.start(workers=0)  # restarted on the same port
    for job_id in ids:
        on_a, on_b = a.job(job_id), b.job(job_id)
        assert on_a == on_b
        assert on_a["status"] == "done" and on_a["run"]["attempt"] == on_a["attempts"]


def test_a_quota_is_shared_and_an_upload_through_one_replica_runs_on_the_other(
    replicas: Callable[..., Replica],
) -> None:
    a = replicas("a", workers=0, SUBMIT_RATE="8")
    b = replicas("b", workers=1, SUBMIT_RATE="8")
    wait_for(lambda: b.client.get("/api/v1/workers").json()["count"], 90, "b's worker")

    def softmax(x: jax.Array) -> jax.Array:
        return jax.nn.softmax(x, axis=-1)

    data, _ = export_function(softmax, [("float32", (4, 8))], ["cpu"])
    octet = {"Content-Type": "application/octet-stream"}
    upload = a.client.post("/api/v1/artifacts", params={"kind": "exported"}, content=data,
                           headers=octet)  # fmt: skip
    assert upload.status_code == 201, upload.text
    spec = {
        "workload": "exported",
        "path": "jax-cpu",
        "params": {"artifact": upload.json()["sha256"]},
        "measure": {"samples": 3},
    }
    job_id = a.submit(spec).json()["id"]  # through a, which has no worker
    job = wait_for(lambda: (j := b.job(job_id))["status"] in FINAL and j, 120, "the job")
    assert job["status"] == "done", job
    assert job["worker_name"] == "local-1"  # b's worker fetched the file a stored

    # 2 of the client's 8 a minute went through a (the upload, the job); 3 more there...
    assert [a.submit(COMPILE_64).status_code for _ in range(3)] == [202] * 3
    # ...and b has 3 left, not 8: the quota is the client's, whichever replica it asks.
    codes = [b.submit(COMPILE_64).status_code for _ in range(4)]
    assert codes == [202, 202, 202, 429]
    refused = b.submit(COMPILE_64)
    assert "more than 8 submissions a minute" in refused.json()["detail"]
    assert int(refused.headers["Retry-After"]) >= 1


def test_the_live_page_on_one_replica_shows_progress_reported_to_the_other(
    replicas: Callable[..., Replica],
) -> None:
    a = replicas("a", workers=1)
    b = replicas("b", workers=0)
    wait_for(lambda: b.client.get("/api/v1/workers").json()["count"], 90, "a's worker")
    spec = {  # long enough (seconds) for the worker to report sampling k/N on the way
        "workload": "matmul",
        "path": "jax-cpu",
        "params": {"m": 512, "n": 512, "k": 512},
        "measure": {"samples": 1000},
    }
    job_id = b.submit(spec).json()["id"]  # a's worker takes it and reports to a
    seen: list[str] = []
    with b.client.stream("GET", f"/runs/{job_id}/live", timeout=120) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:") and '<progress max="1000"' in line:
                seen.append(line)
                break
    assert seen, "b's live page never showed the sampling progress"
    job = a.job(job_id)
    assert job["status"] == "running" and job["worker_name"] == "local-1"
    assert job["progress"]["phase"] == "sampling"  # a's own view, from its worker
    assert b.job(job_id)["progress"]["phase"] in ("sampling", "checked")  # and b's
    assert b.client.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200


def test_readyz_is_not_ready_while_the_database_is_unreachable(tmp_path: Path) -> None:
    with running_cluster() as cluster:
        replica = Replica(tmp_path, "a", cluster.url, 0, DB_TIMEOUT_S="2")
        replica.start()
        try:
            assert replica.client.get("/readyz").json() == {"status": "ready"}
            cluster.stop("fast")
            started = time.monotonic()
            down = replica.client.get("/readyz")
            assert down.status_code == 503 and down.json()["status"] == "store unreachable"
            assert time.monotonic() - started < 5
            assert replica.client.get("/healthz").status_code == 200  # alive, not ready
            cluster.start()
            wait_for(lambda: replica.client.get("/readyz").status_code == 200, 20, "ready")
        finally:
            replica.stop()
