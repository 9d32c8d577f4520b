"""End to end: a real server (uvicorn) and real worker processes on 127.0.0.1.

Every test stops what it started. The hang hook of workers.agent.runner (BOUNDARY_TEST_HOOKS=1
with BOUNDARY_TEST_HANG_FILE) makes a job hang on demand.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import loopback
from workers.agent.agent import ESCALATE_AFTER_S
from workers.cli.submit import submit_to_server
from workers.export.server_address import ServerAddress
from workers.protocol import JobSpec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "e2e-worker-token"
FIT_GATHER = ("gather", "width=4096", "count=1024", "--dim", "rows", "--range", "1:16777216")
"""A fit search of four compiles whose answer tests/workers/test_cli_fit.py checks too."""
SMALL = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 32, "n": 32, "k": 32},
    "measure": {"samples": 3},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Cluster:
    """Starts servers and workers; `close` stops every process it started."""

    def __init__(self, tmp: Path, **settings: str) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "BOUNDARY_DB": str(tmp / "boundary.sqlite3"),
            "BOUNDARY_WORKER_TOKEN": TOKEN,
            "BOUNDARY_CACHE_DIR": str(tmp / "jax-cache"),
            "BOUNDARY_FILES_DIR": str(tmp / "files"),  # not a folder the shell may name
            "BOUNDARY_POLL_S": "5",
            "BOUNDARY_LEASE_S": "3",
            "BOUNDARY_REAP_INTERVAL_S": "0.2",
            **{f"BOUNDARY_{k}": v for k, v in settings.items()},
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.servers: list[subprocess.Popen[bytes]] = []
        self.server: subprocess.Popen[bytes] | None = None
        self.client = loopback.Client(base_url=self.url, timeout=10.0)

    def _spawn(
        self, args: list[str], env: dict[str, str], log: str, session: bool = False
    ) -> subprocess.Popen[bytes]:
        out = open(self.tmp / log, "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=session,
        )
        out.close()
        self.procs.append(proc)
        return proc

    def start_server(self) -> None:
        args = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app"]
        args += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        self.server = self._spawn(args, self.env, "server.log")
        self.servers.append(self.server)
        self.wait(self._ready, 30, "the server to start")

    def _ready(self) -> bool:
        try:
            return self.client.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def log(self, name: str) -> str:
        """What the process started with log `name` (server, worker-NAME) has said."""
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill_server(self) -> None:
        assert self.server is not None
        self.server.kill()
        self.server.wait(10)

    def start_worker(self, name: str, session: bool = False, **env: str) -> subprocess.Popen[bytes]:
        """A worker process; with `session`, in a process group of its own."""
        args = [sys.executable, "-m", "workers.cli.worker", "--server", self.url, "--name", name]
        return self._spawn(args, {**self.env, **env}, f"worker-{name}.log", session)

    def start_fit(self, *args: str) -> subprocess.Popen[bytes]:
        """`boundary fit … --server` this cluster's server, its output in log `fit`."""
        command = [sys.executable, "-m", "app.cli", "fit", *args, "--server", self.url]
        return self._spawn(command, self.env, "fit.log")

    def wait_worker(self, name: str, timeout: float = 60) -> str:
        def registered() -> str | None:
            data = self.client.get("/api/v1/workers").json()["data"]
            return next((w["id"] for w in data if w["name"] == name), None)

        worker_id: str = self.wait(registered, timeout, f"worker {name} to register")
        return worker_id

    def submit(self, spec: dict[str, Any] = SMALL) -> str:
        r = self.client.post("/api/v1/jobs", json=spec)
        assert r.status_code == 202, r.text
        job_id: str = r.json()["id"]
        return job_id

    def job(self, job_id: str) -> dict[str, Any]:
        try:
            response = self.client.get(f"/api/v1/jobs/{job_id}")
        except (httpx.ReadError, httpx.RemoteProtocolError):
            # The server closed this kept-alive connection (idle past uvicorn's 5 s, when
            # a loaded machine stalls this process) as the request went out: ask again.
            response = self.client.get(f"/api/v1/jobs/{job_id}")
        body: dict[str, Any] = response.json()
        return body

    def wait_status(self, job_id: str, statuses: set[str], timeout: float = 90) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in statuses else None

        job: dict[str, Any] = self.wait(reached, timeout, f"job {job_id} to reach {statuses}")
        return job

    def wait(self, probe: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = probe()
            if value:
                return value
            time.sleep(0.1)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.tmp.glob("*.log"))
        raise AssertionError(f"timed out waiting for {what}\n{logs}")

    def close(self) -> None:
        """Stop the workers first, while the server still answers what they say on their
        way out (without it, each retries for some 15 s), then the servers."""
        self.client.close()
        stop([p for p in self.procs if p not in self.servers])
        stop(self.servers)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each of `procs` still running; a kill for any still there after 15 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(**settings: str) -> Cluster:
        c = Cluster(tmp_path, **settings)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    """A server and one worker with the default settings, and the worker's id: for the
    tests that only run jobs on them (one that kills, hangs, restarts or times out
    something starts its own)."""
    c = Cluster(tmp_path_factory.mktemp("agent"))
    try:
        c.start_server()
        c.start_worker("w1")
        yield c, c.wait_worker("w1")
    finally:
        c.close()


def test_a_real_worker_runs_a_job_and_the_run_is_kept(
    running: tuple[Cluster, str], capsys: pytest.CaptureFixture[str]
) -> None:
    c, worker_id = running
    workers = c.client.get("/api/v1/workers").json()["data"]
    assert workers[0]["platform"] == "cpu" and workers[0]["paths"][0] == "jax-cpu"
    assert workers[0]["paths"][1:] == (["cuda"] if workers[0]["cuda_compile"] else [])

    job_id = c.submit()
    job = c.wait_status(job_id, {"done", "failed"})
    assert job["status"] == "done", job
    run = job["run"]
    assert run["valid"] is True and run["worker_id"] == worker_id
    assert run["measurements"][0]["boundary"] == "host-sync"
    assert len(run["measurements"][0]["samples_s"]) == 3
    hlo = c.client.get(run["artifact_links"]["hlo"])
    assert hlo.status_code == 200 and "HloModule" in hlo.text

    # `boundary run --server` prints the same single JSON document a local run prints.
    spec = JobSpec.model_validate(SMALL)
    assert submit_to_server(spec, ServerAddress.parse(c.url), True, None) == 0
    out = capsys.readouterr().out
    printed = out.strip().splitlines()
    assert len(printed) == 1 and '"valid":true' in printed[0]


def test_a_gpu_job_never_runs_on_cpu_workers(cluster: Callable[..., Cluster]) -> None:
    c = cluster(QUEUE_TIMEOUT_S="4")
    c.start_server()
    c.start_worker("cpu-only")
    c.wait_worker("cpu-only")
    job_id = c.submit({**SMALL, "path": "jax-gpu"})
    cpu_job = c.submit()
    assert c.wait_status(cpu_job, {"done"})["status"] == "done"
    waiting = c.job(job_id)
    assert waiting["status"] == "queued"
    assert waiting["reason"].startswith("no worker for jax-gpu is connected")
    expired = c.wait_status(job_id, {"expired", "done", "failed"}, timeout=30)
    assert expired["status"] == "expired" and expired["attempts"] == 0
    assert "no worker for jax-gpu" in expired["reason"]


def test_a_killed_worker_loses_its_job_to_another_and_its_runner_dies(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster(LEASE_S="2")
    hang = c.tmp / "hang"
    hang.touch()
    c.start_server()
    first = c.start_worker("doomed", BOUNDARY_TEST_HOOKS="1", BOUNDARY_TEST_HANG_FILE=str(hang))
    doomed_id = c.wait_worker("doomed")
    job_id = c.submit()
    c.wait(lambda: not hang.exists(), 60, "the job to start hanging")
    assert c.job(job_id)["status"] == "running"
    runners = children_of(first.pid)
    assert runners, "the worker should have a runner child"

    first.kill()
    first.wait(10)
    c.wait(lambda: not any(alive(pid) for pid in runners), 10, "the runner to die")

    c.start_worker("rescuer")
    rescuer_id = c.wait_worker("rescuer")
    job = c.wait_status(job_id, {"done", "failed"}, timeout=90)
    assert job["status"] == "done", job
    assert job["attempts"] == 2
    assert job["run"]["worker_id"] == rescuer_id != doomed_id


def test_queued_jobs_and_a_fit_search_survive_a_server_restart(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster()
    c.start_server()
    jobs = [c.submit() for _ in range(3)]
    fit = c.start_fit(*FIT_GATHER, "--target", "h100:1")  # its compiles wait for a worker
    c.wait(lambda: "fit search " in c.log("fit"), 60, "boundary fit to queue its search")
    c.kill_server()  # SIGKILL: nothing is flushed on the way out
    c.start_worker("patient")  # finds no server and keeps retrying
    c.wait(lambda: "server unreachable" in c.log("worker-patient"), 60, "the worker to retry")
    c.wait(lambda: "server unreachable" in c.log("fit"), 60, "boundary fit to retry")
    c.start_server()
    for job_id in jobs:
        assert c.wait_status(job_id, {"done", "failed"})["status"] == "done"
    assert fit.wait(120) == 0, c.log("fit")
    assert re.search(
        r"h100:1\s+3,661,085\n\s+3,661,085: fits: peak [\d,]+ bytes ≤ 60,000,000,000 usable\n"
        r"\s+3,661,086: does not fit: peak [\d,]+ bytes > 60,000,000,000 usable\n",
        c.log("fit"),
    )


def test_a_hung_runner_is_killed_and_the_worker_takes_the_next_job(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster(JOB_TIMEOUT_S="3")
    hang = c.tmp / "hang"
    hang.touch()
    c.start_server()
    c.start_worker("w", BOUNDARY_TEST_HOOKS="1", BOUNDARY_TEST_HANG_FILE=str(hang))
    c.wait_worker("w")
    hung = c.submit()
    failed = c.wait_status(hung, {"done", "failed"}, timeout=60)
    assert failed["status"] == "failed"
    assert "past its time limit of 3 s" in failed["reason"]
    assert "test hook: hanging" in failed["stderr_tail"]
    next_job = c.submit()
    assert c.wait_status(next_job, {"done", "failed"})["status"] == "done"


def test_cancel_kills_the_runner_and_sigterm_gives_the_lease_back(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster(LEASE_S="2")  # heartbeats every 0.5 s
    hang = c.tmp / "hang"
    hang.touch()
    c.start_server()
    worker = c.start_worker(
        "w", session=True, BOUNDARY_TEST_HOOKS="1", BOUNDARY_TEST_HANG_FILE=str(hang)
    )
    c.wait_worker("w")

    # Cancelling a running job reaches the worker at its next heartbeat: the hung runner
    # is killed, and the next job runs on a fresh one.
    hung = c.submit()
    c.wait(lambda: not hang.exists(), 60, "the job to start hanging")
    assert c.client.post(f"/api/v1/jobs/{hung}/cancel").json()["status"] == "cancelled"
    after = c.submit()
    ended = c.wait_status(after, {"done", "failed"})
    assert ended["status"] == "done", ended  # its error, when it failed

    # SIGTERM to the whole process group (as a service manager sends it): the runner
    # ignores it and the worker finishes its job first; a second SIGTERM to the worker
    # gives the lease back.
    hang.touch()
    held = c.submit()
    c.wait(lambda: not hang.exists(), 60, "the job to start hanging")
    runners = children_of(worker.pid)
    os.killpg(worker.pid, signal.SIGTERM)
    c.wait(lambda: "stopping after the current job" in c.log("worker-w"), 30, "the first stop")
    stopping = time.monotonic()  # the worker took the first signal by now
    assert worker.poll() is None and c.job(held)["status"] == "running"
    assert all(alive(pid) for pid in runners)
    # A signal counts as a second one past the burst of the first (ESCALATE_AFTER_S).
    burst = lambda: time.monotonic() - stopping >= ESCALATE_AFTER_S  # noqa: E731
    c.wait(burst, 10, "the first signal's burst to pass")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    job = c.job(held)
    assert job["status"] == "queued" and job["attempts"] == 0
    assert not any(alive(pid) for pid in runners)

    c.start_worker("next")
    assert c.wait_status(held, {"done", "failed"})["status"] == "done"


def test_a_cpu_worker_compiles_a_gpu_target_and_the_run_page_says_so(
    running: tuple[Cluster, str],
) -> None:
    c, _ = running
    worker = c.client.get("/api/v1/workers").json()["data"][0]
    assert "b200:1" in worker["targets"] and "v6e:2x4" in worker["targets"]
    spec = {"workload": "matmul", "path": "jax-gpu", "target": "b200:1", "params": {"m": 64}}
    job = c.wait_status(c.submit(spec), {"done", "failed"})
    assert job["status"] == "done", job
    run = job["run"]
    assert run["target"]["deviceless"] is True and run["measurements"] == []
    assert run["environment"]["platform"] == "cpu"
    page = c.client.get(f"/runs/{job['id']}")
    assert page.status_code == 200 and "Compiled without the hardware" in page.text
    assert "--target b200:1" in page.text  # the reproduce command keeps the target
    assert "180 GB HBM3E per GPU" in page.text  # memory beside the chip's published HBM
