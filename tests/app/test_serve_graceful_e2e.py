"""Graceful local workers under a real `boundary serve`: a burst of stop signals to a
worker, or SIGTERM to the server, lets the running job finish and be reported; a worker
that exits is started again."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import loopback
from tests.app.test_serve_e2e import wait_for, worker_pids
from tests.browser.conftest import free_port, wait_until_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# A job of several seconds on a CPU worker: time to signal it while it runs.
LONG: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 768, "n": 768, "k": 768, "dtype": "float32"},
    "measure": {"samples": 150},
}


def job_row(db: Path, job_id: str) -> tuple[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        status, attempts = conn.execute(
            "SELECT status, attempts FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
    return str(status), int(attempts)


def running(url: str, job_id: str) -> bool:
    return bool(loopback.get(f"{url}/api/v1/jobs/{job_id}").json()["status"] == "running")


def test_a_job_in_hand_is_finished_and_reported_when_stopping(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "db.sqlite3"
    env = {k: v for k, v in os.environ.items() if k != "BOUNDARY_WORKER_TOKEN"}
    env.update(BOUNDARY_DB=str(db), BOUNDARY_WORKER_GRACE_S="120")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "1"],
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, proc)
        assert wait_for(lambda: loopback.get(url + "/api/v1/workers").json()["count"] >= 1, 90)

        # 1. The worker gets a burst of SIGTERMs (as the parent-death signal used to send,
        #    or a process-group kill): it finishes the job, reports it, and exits; serve
        #    starts a new one.
        first = loopback.post(url + "/api/v1/jobs", json=LONG).json()["id"]
        assert wait_for(lambda: running(url, first), 90)
        (pid,) = worker_pids(port)
        for _ in range(5):
            os.kill(pid, signal.SIGTERM)
        assert wait_for(lambda: job_row(db, first)[0] != "running", 120)
        assert job_row(db, first) == ("done", 1)
        assert wait_for(lambda: worker_pids(port) not in ([], [pid]), 30)

        # 2. SIGTERM to serve: no new lease, the job in hand finishes and is reported,
        #    then the server closes.
        second = loopback.post(url + "/api/v1/jobs", json=LONG).json()["id"]
        assert wait_for(lambda: running(url, second), 120)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=150) == 0
        assert job_row(db, second) == ("done", 1)
        assert not worker_pids(port)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in worker_pids(port):
            os.kill(pid, signal.SIGKILL)
