"""`boundary serve --uds` as a host without TCP runs it: a real server on a unix socket left
stale by a killed one, its local worker and a `boundary worker --server unix:PATH` on the
socket, and `boundary run`, `fit` and `mcp` reaching it there. No process of theirs holds
a TCP or UDP socket; a second server on the live socket is refused."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.servers import ROOT, SERVER_WORKER_TOKEN, family, inet_sockets, serve_on_socket
from workers.export.server_address import ServerAddress

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUICK = {"BOUNDARY_WORKER_CEILINGS": "0", "BOUNDARY_WORKER_TOKEN": SERVER_WORKER_TOKEN}


@dataclass(frozen=True)
class OnSocket:
    """The server on its socket, its log, and every process started for it."""

    server: ServerAddress
    path: Path
    log: Path
    procs: tuple[subprocess.Popen[bytes], ...]

    def boundary(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "app.cli", *args]
        return subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
        )

    def api(self, path: str) -> Any:
        with self.server.client() as client:
            return client.get(path).json()


def workers_on(server: ServerAddress) -> dict[str, list[str]]:
    """The connected workers' names, each with the targets it compiles for."""
    with server.client() as client:
        data = client.get("/api/v1/workers").json()["data"]
    return {w["name"]: w.get("targets") or [] for w in data}


@pytest.fixture(scope="module")
def on_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnSocket]:
    """`serve --uds --uds-mode 660` with one local worker (no targets) over a stale socket,
    and a worker of its own on the socket (`on-socket`, which compiles for targets)."""
    tmp = tmp_path_factory.mktemp("socket")
    with tempfile.TemporaryDirectory(prefix="bsock-") as name:  # a short path
        path = Path(name) / "b.sock"
        killed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        killed.bind(str(path))  # a socket file that nothing listens on any more
        killed.close()
        env = {**QUICK, "BOUNDARY_WORKER_TARGETS": "0"}
        options = ("--uds-mode", "660")
        with serve_on_socket(path, tmp, 1, env, *options) as (server, proc, log):
            worker = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker", "--server", f"unix:{path}",
                 "--name", "on-socket"],
                cwd=ROOT, env={**os.environ, **QUICK, **folders(tmp)},
            )  # fmt: skip
            try:
                deadline = time.monotonic() + 180
                while "h100:1" not in workers_on(server).get("on-socket", []) or (
                    "local-1" not in workers_on(server)
                ):
                    assert time.monotonic() < deadline, "the workers did not register"
                    assert worker.poll() is None, "the worker exited"
                    time.sleep(0.2)
                yield OnSocket(server, path, log, (proc, worker))
            finally:
                worker.terminate()
                worker.wait(timeout=60)


def folders(tmp: Path) -> dict[str, str]:
    """The worker's own cache and files folders (not the server's)."""
    return {
        "BOUNDARY_CACHE_DIR": str(tmp / "worker-cache"),
        "BOUNDARY_FILES_DIR": str(tmp / "worker-files"),
    }


def test_a_stale_socket_is_replaced_with_the_mode_asked_for(on_socket: OnSocket) -> None:
    said = on_socket.log.read_text(errors="replace")
    assert f"removed {on_socket.path}: no server answered on it" in said
    assert f"serves on the unix socket {on_socket.path} (mode 660)" in said
    assert stat.S_IMODE(on_socket.path.lstat().st_mode) == 0o660
    assert on_socket.api("/healthz") == {"status": "ok"}


def test_a_second_server_on_the_live_socket_is_refused(on_socket: OnSocket) -> None:
    refused = on_socket.boundary("serve", "--uds", str(on_socket.path), "--workers", "0")
    assert refused.returncode == 2
    assert "a server is listening on it already" in refused.stderr
    assert on_socket.api("/healthz") == {"status": "ok"}  # and it still serves


def test_boundary_run_and_fit_reach_the_server_and_its_workers_over_the_socket(
    on_socket: OnSocket,
) -> None:
    path = str(on_socket.path)
    small = ["matmul", "m=64", "n=64", "k=64", "--samples", "5", "--json"]
    ran = on_socket.boundary("run", *small, "--server", f"unix:{path}")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["valid"] is True
    assert f"http://unix:{path}:/runs/" in ran.stderr
    # A compile for a target: only the worker of its own compiles for one.
    target = ["matmul", "m=256", "n=256", "k=256", "--path", "jax-gpu", "--target", "h100:1"]
    compiled = on_socket.boundary("run", *target, "--json", "--server", f"unix://{path}")
    assert compiled.returncode == 0, compiled.stderr
    job_id = re.search(r"job ([0-9a-f]{16}) queued", compiled.stderr)
    assert job_id is not None, compiled.stderr
    assert on_socket.api(f"/api/v1/jobs/{job_id[1]}")["worker_name"] == "on-socket"

    gather = ["gather", "width=4096", "count=1024", "--dim", "rows", "--range", "1:16777216"]
    fit = on_socket.boundary(
        "fit", *gather, "--target", "h100:1", "--server", str(on_socket.server)
    )
    assert fit.returncode == 0, fit.stderr
    assert re.search(
        r"h100:1\s+3,661,085\n\s+3,661,085: fits: peak [\d,]+ bytes ≤ 60,000,000,000 usable\n",
        fit.stdout,
    )
    assert re.search(
        rf"http://unix:{re.escape(str(on_socket.path))}:/fits/[0-9a-f]{{16}}", fit.stdout
    )


def test_boundary_mcp_reaches_the_server_over_the_socket(on_socket: OnSocket) -> None:
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--server", f"unix:{on_socket.path}"],
        cwd=str(ROOT),
    )
    small = {"workload": "matmul", "target": "h100:1", "timeout_s": 240,
             "params": {"m": 128, "n": 128, "k": 128, "dtype": "bfloat16"}}  # fmt: skip

    async def session() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(command) as client:
            answers = []
            for tool, arguments in (("list_targets", {}), ("compile", small)):
                result = await client.call_tool(tool, arguments)
                text: str = result.content[0].text  # type: ignore[union-attr]
                assert not result.is_error, text
                answers.append(json.loads(text))
            return answers[0], answers[1]

    targets, compiled = anyio.run(session)
    listed = [t for m in targets["models"] for t in m["targets"]]
    h100 = next(t for t in listed if t["id"] == "h100:1")
    assert h100["compiled_by"]
    assert compiled["status"] == "done" and compiled["target"] == "h100:1"
    assert compiled["address"] == f"http://unix:{on_socket.path}:/runs/{compiled['run_id']}"


def test_no_process_of_the_server_or_its_workers_holds_a_tcp_or_udp_socket(
    on_socket: OnSocket,
) -> None:
    """After the jobs above: the server, both workers and their runners spoke over the
    unix socket alone (a host that allows no TCP or UDP socket runs them as they are)."""
    pids = [pid for proc in on_socket.procs for pid in family(proc.pid)]
    assert len(pids) >= 5  # serve, its worker and that one's runner, the worker and its runner
    assert inet_sockets(pids) == {}
