"""`boundary run … --server URL` as a person types it, against a real `boundary serve` with
one local worker: --ir prints the server's artifact, --profile says where the trace is,
and the report of a compile-only target run names its page and the target, not the host.
They share the session's server (tests/conftest.py: bench_server)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import loopback

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["matmul", "m=32", "n=32", "k=32", "--samples", "3"]


@pytest.fixture(scope="module")
def server(bench_server: str) -> str:
    return bench_server


def boundary_run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "app.cli", "run", *args]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def test_ir_with_a_server_prints_the_artifact_the_server_keeps(server: str) -> None:
    done = boundary_run(*SMALL, "--ir", "stablehlo", "--server", server)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^module @jit_matmul", done.stdout, re.M), done.stdout[:500]
    assert "stablehlo.dot_general" in done.stdout
    assert "matmul on jax-cpu" not in done.stdout  # the IR, not the report
    job_id = re.search(r"queued: \S+/runs/(\w+)", done.stderr)
    assert job_id is not None, done.stderr
    stored = loopback.get(f"{server}/api/v1/jobs/{job_id[1]}/artifacts/stablehlo").text
    assert done.stdout.rstrip("\n") == stored.rstrip("\n")
    missing = boundary_run(*SMALL, "--ir", "ptx", "--server", server)
    assert missing.returncode == 1 and "no ptx artifact: path jax-cpu" in missing.stderr


def test_profile_with_a_server_says_where_the_trace_is(server: str, tmp_path: Path) -> None:
    done = boundary_run(*SMALL, "--profile", "--server", server, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = re.search(r"^run page  (\S+/runs/\w+)$", done.stdout, re.M)
    assert page is not None, done.stdout
    line = re.search(r"^profile   .*kept by the server: (\S+) ", done.stdout, re.M)
    assert line is not None, done.stdout
    assert line[1] == f"{page[1]}/profile"
    trace = loopback.get(line[1])
    assert trace.status_code == 200 and trace.content[:2] == b"\x1f\x8b"  # the .tar.gz
    assert loopback.get(f"{page[1]}/profile/timeline").status_code == 200
    assert list(tmp_path.iterdir()) == []  # nothing claimed to be written here


def test_a_compile_only_target_run_reports_its_page_and_the_target(server: str) -> None:
    args = ["sharded-matmul", "m=512", "n=512", "k=512", "dtype=bfloat16", "sharding=tensor"]
    done = boundary_run(*args, "--path", "jax-tpu", "--target", "v6e:2x4", "--server", server)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    job_id = re.search(r"queued: (\S+)/runs/(\w+)", done.stderr)
    assert job_id is not None and "/api/v1/jobs/" not in done.stderr, done.stderr
    assert f"run page  {server}/runs/{job_id[2]}\n" in out
    assert loopback.get(f"{server}/runs/{job_id[2]}").status_code == 200
    assert "device    none: compiled for v6e:2x4 without the hardware" in out
    assert "device    cpu" not in out
    assert not re.search(r"^rates ", out, re.M), out  # nothing ran: no rates line
    assert re.search(r"^work      \S+ [kMG]?FLOP, \S+ [kMG]?B moved \(analytic\)", out, re.M), out
    assert not re.search(r"\b\w+= ", out + " "), out  # no "mesh= axes=" settings
    assert not re.search(r"^  fusion .*: ?$", out, re.M), out  # no empty fusion lines
    assert not re.search(r"\b1 fusions\b", out)
    assert "n/a, n/a accessed" not in out
