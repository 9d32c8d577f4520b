"""The device tier: tests that need a real accelerator chip, run where one is attached.

`./scripts/test --device` runs them on the chip's host, in one pytest process that never
opens the chip itself: one process at a time may hold a TPU, and here that is the worker's
runner. The session starts `boundary serve --uds` (no TCP: the chip's host allows none)
and a `boundary worker --server unix:…` beside it, and every test goes through them as a
user would: the HTTP API, `boundary run --server`, MCP. Everywhere else, CI included, each
test is skipped with the reason.

`BOUNDARY_DEVICE_TIER=cpu` runs the same tests on this machine's CPU (path `jax-cpu`, small
sizes, the chip's own assertions left out): a check of the tier itself before device time
is spent on it. Findings (figures, verdicts) go as JSON lines to the file
`BOUNDARY_DEVICE_REPORT` names, and to the output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ROOT, SERVER_WORKER_TOKEN, serve_on_socket
from workers.compiler.jaxenv import accelerator
from workers.export.server_address import ServerAddress

NO_CHIP = (
    "no TPU chip here: the device tier runs on a machine with one "
    "(./scripts/test --device, docs/testing.md)"
)
FINAL = ("done", "failed", "expired", "cancelled")
JOB_TIMEOUT_S = 480.0
KEPT_CHARS = 200_000
"""Of each artifact a kept run carries: enough to read its fusions, small enough to keep."""


@dataclass(frozen=True)
class Chip:
    """Where the tier runs: a real TPU (`path` jax-tpu) or, to check the tier, the CPU."""

    on_tpu: bool

    @property
    def path(self) -> str:
        return "jax-tpu" if self.on_tpu else "jax-cpu"

    def size(self, n: int, small: int) -> int:
        """`n` on the chip, `small` on the CPU."""
        return n if self.on_tpu else small


@pytest.fixture(scope="session")
def chip() -> Chip:
    """The chip this tier runs on (found by its device files, without opening it)."""
    if os.environ.get("BOUNDARY_DEVICE_TIER") == "cpu":
        return Chip(on_tpu=False)
    if accelerator() != "tpu":
        pytest.skip(NO_CHIP)
    return Chip(on_tpu=True)


@dataclass
class ChipServer:
    """`serve --uds` and one worker that holds the chip, with what a test needs of them."""

    server: ServerAddress
    socket: Path
    tmp: Path
    worker: subprocess.Popen[bytes]
    worker_log: Path
    env: dict[str, str]

    def post(self, path: str, **kwargs: Any) -> Any:
        with self.server.client(timeout=60) as client:
            return client.post(path, **kwargs)

    def get(self, path: str) -> Any:
        with self.server.client(timeout=60) as client:
            return client.get(path)

    def submit(self, body: dict[str, Any]) -> str:
        answer = self.post("/api/v1/jobs", json=body)
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["id"]
        return job_id

    def wait(self, job_id: str, timeout: float = JOB_TIMEOUT_S) -> dict[str, Any]:
        """The job once it has ended (its run inline), or a failure after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.server.client(timeout=60) as client:
            while time.monotonic() < deadline:
                job: dict[str, Any] = client.get(f"/api/v1/jobs/{job_id}").json()
                if job["status"] in FINAL:
                    return job
                time.sleep(0.5)
        pytest.fail(f"job {job_id} did not end within {timeout:.0f} s")

    def run(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.wait(self.submit(body))

    def boundary(
        self, *args: str, timeout: float = JOB_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """`boundary ARGS` as a user types it, off the chip (the worker holds it)."""
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            cwd=ROOT,
            env={**os.environ, **self.env, "BOUNDARY_JAX_PLATFORMS": "cpu"},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start_worker(self) -> None:
        """(Re)start the worker that holds the chip, and wait until it has registered."""
        self.worker, self.worker_log = _worker(self.socket, self.tmp, self.env)
        _registered(self)


def _worker(socket: Path, tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"worker-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--server", f"unix:{socket}",
             "--name", "chip"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **env,
                 "BOUNDARY_CACHE_DIR": str(tmp / "worker-cache"),
                 "BOUNDARY_FILES_DIR": str(tmp / "worker-files")},
        )  # fmt: skip
    return proc, log


def _registered(chip_server: ChipServer, timeout: float = 300.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert chip_server.worker.poll() is None, chip_server.worker_log.read_text()[-3000:]
        data = chip_server.get("/api/v1/workers").json()["data"]
        found = [w for w in data if w.get("name") == "chip"]
        if found:
            return found[0]
        time.sleep(0.5)
    pytest.fail("the worker that holds the chip never registered")


@pytest.fixture(scope="session")
def chip_server(chip: Chip, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChipServer]:
    """A server on a unix socket and a worker that holds the chip (on the CPU tier, a CPU
    worker); stopped, with every process they started, at the session's end."""
    tmp = tmp_path_factory.mktemp("chip")
    env = {"BOUNDARY_WORKER_TOKEN": SERVER_WORKER_TOKEN}
    with tempfile.TemporaryDirectory(prefix="bchip-") as name:  # a short socket path
        socket = Path(name) / "b.sock"
        with serve_on_socket(socket, tmp, 0, env):
            worker, log = _worker(socket, tmp, env)
            found = ChipServer(ServerAddress.parse(f"unix:{socket}"), socket, tmp, worker, log, env)
            try:
                _registered(found)
                yield found
            finally:
                found.worker.terminate()
                try:
                    found.worker.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    found.worker.kill()


@pytest.fixture(scope="session")
def record() -> Iterator[Callable[..., None]]:
    """Writes one finding as a JSON line to $BOUNDARY_DEVICE_REPORT (and prints it)."""
    where = os.environ.get("BOUNDARY_DEVICE_REPORT")
    sink = open(where, "a", encoding="utf-8") if where else None  # noqa: SIM115

    def write(test: str, **fields: Any) -> None:
        line = json.dumps({"test": test, **fields}, default=str)
        print(line)
        if sink is not None:
            sink.write(line + "\n")
            sink.flush()

    yield write
    if sink is not None:
        sink.close()


@pytest.fixture(scope="session")
def keep() -> Iterator[Callable[[dict[str, Any]], None]]:
    """Writes a finished job (its run inline, as the API answers it) as one JSON line to
    the file $BOUNDARY_DEVICE_RUNS names: the chip's runs, kept for the record."""
    where = os.environ.get("BOUNDARY_DEVICE_RUNS")
    sink = open(where, "a", encoding="utf-8") if where else None  # noqa: SIM115

    def write(job: dict[str, Any]) -> None:
        if sink is None:
            return
        run = job.get("run") or {}
        artifacts = {k: v[:KEPT_CHARS] if isinstance(v, str) else v
                     for k, v in (run.get("artifacts") or {}).items()}  # fmt: skip
        kept = {**job, "run": {**run, "artifacts": artifacts}} if run else job
        sink.write(json.dumps(kept) + "\n")
        sink.flush()

    yield write
    if sink is not None:
        sink.close()


def stats(run: dict[str, Any]) -> dict[str, float]:
    """Each boundary's median, in seconds, of a published run."""
    return {
        m["boundary"]: m["stats"]["median"]
        for m in run.get("measurements") or []
        if m.get("stats") is not None
    }
