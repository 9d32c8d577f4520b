"""`boundary serve` as a user runs it: a real server process with its local worker."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.local_workers import LocalWorkers
from tests import loopback
from tests.browser.conftest import free_port, wait_until_up

pytestmark = pytest.mark.e2e


def worker_pids(port: int) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", f"worker --server http://127.0.0.1:{port} "],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [int(pid) for pid in out.split()]


def wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_local_workers_start_with_the_server_and_stop_with_it(
    tmp_path: Path, how: signal.Signals
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "BOUNDARY_WORKER_TOKEN"}
    env["BOUNDARY_DB"] = str(tmp_path / "db.sqlite3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "1"],
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, proc)
        # A token was generated and shared: the local worker registers with the server.
        assert wait_for(lambda: loopback.get(url + "/api/v1/workers").json()["count"] == 1, 60)
        workers = loopback.get(url + "/api/v1/workers").json()["data"]
        assert workers[0]["name"] == "local-1" and "jax-cpu" in workers[0]["paths"]
        assert len(worker_pids(port)) == 1
        proc.send_signal(how)
        proc.wait(timeout=30)
        # The worker never outlives the server, even when the server is SIGKILLed.
        assert wait_for(lambda: not worker_pids(port), 20), worker_pids(port)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in worker_pids(port):
            os.kill(pid, signal.SIGKILL)


def test_serve_does_not_log_every_request_its_worker_makes(tmp_path: Path) -> None:
    """A worker polls for leases and beats its heart: `serve`'s log used to carry one
    "HTTP Request: POST …" line for each (httpx at INFO). Starting, a job and stopping
    are still said."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "BOUNDARY_WORKER_TOKEN"}
    env["BOUNDARY_DB"] = str(tmp_path / "db.sqlite3")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(url, proc)
            assert wait_for(lambda: loopback.get(url + "/api/v1/workers").json()["count"] == 1, 60)
            body = {
                "workload": "matmul",
                "params": {"m": 16, "n": 16, "k": 16},
                "stages": ["compile"],
            }
            job = loopback.post(url + "/api/v1/jobs", json=body).json()["id"]
            done = lambda: loopback.get(f"{url}/api/v1/jobs/{job}").json()["status"] == "done"  # noqa: E731
            assert wait_for(done, 60)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert "registered as" in text  # the worker still says what it is
    requests = [line for line in text.splitlines() if "HTTP Request:" in line]
    assert not requests, requests[:3]


def test_a_local_worker_that_refuses_its_configuration_is_not_started_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A size the worker cannot read would refuse again on every start, once a second."""
    env = {**os.environ, "BOUNDARY_WORKER_TOKEN": "t" * 16}
    env["BOUNDARY_RUNNER_MAX_MEMORY"] = "2GiB"
    workers = LocalWorkers(f"http://127.0.0.1:{free_port()}", 1, env, grace_s=1.0)
    with caplog.at_level(logging.ERROR, logger="boundary.serve"):
        workers.start()
        try:
            assert wait_for(lambda: workers.refused == {0}, 60)
            assert workers.restarts == 0 and not workers._alive()
        finally:
            workers.stop()
    assert "local worker 1 refused its configuration" in caplog.text
