"""Reader pages under load: requests/s and p99 against a plain Starlette "hello".

Starts both servers under uvicorn's defaults (`boundary serve` exactly as a user runs it,
and `uvicorn bench.hello_starlette:app`), each pinned to core 0, drives them with wrk
pinned to core 1, alternating rounds so drift on this noisy machine hits both sides, and
prints the ratio of medians. Goal: reader ≥ 0.8× hello, p99 ≤ 10 ms at 50 connections.
Also measures how soon `boundary serve` answers its first request (goal ≤ 1.5 s).

    .venv/bin/python bench/reader_load.py [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    return subprocess.Popen(
        pin + cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def wait_first_response(url: str, proc: subprocess.Popen[bytes], t0: float) -> float:
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"server for {url} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=0.5)
            return time.perf_counter() - t0
        except httpx.TransportError:
            time.sleep(0.005)


def wrk(url: str, seconds: int, connections: int) -> tuple[float, float]:
    """(requests/s, p99 in ms) from one wrk run."""
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") else []
    out = subprocess.run(
        [
            *pin,
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-H",
            "Accept-Encoding: br, gzip",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    assert m, out
    p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    return rps, p99


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk)")

    tmp = Path(tempfile.mkdtemp(prefix="boundary-bench-"))
    env = {**os.environ, "BOUNDARY_DB": str(tmp / "db.sqlite3")}
    hello_port, reader_port = free_port(), free_port()
    hello_url = f"http://127.0.0.1:{hello_port}/"
    reader_url = f"http://127.0.0.1:{reader_port}/read/jax-gpu/compile"

    t0 = time.perf_counter()
    reader = start([PY, "-m", "app.cli", "serve", "--port", str(reader_port)], env)
    first = wait_first_response(reader_url, reader, t0)
    hello = start(
        [
            PY,
            "-m",
            "uvicorn",
            "bench.hello_starlette:app",
            "--port",
            str(hello_port),
            "--log-level",
            "warning",
        ],
        env,
    )
    wait_first_response(hello_url, hello, time.perf_counter())
    try:
        wrk(hello_url, 2, args.connections)  # warm both before measuring
        wrk(reader_url, 2, args.connections)
        hello_rps, reader_rps, reader_p99 = [], [], []
        for i in range(args.rounds):
            order = [("hello", hello_url), ("reader", reader_url)]
            if i % 2:
                order.reverse()
            for name, url in order:
                rps, p99 = wrk(url, args.seconds, args.connections)
                if name == "hello":
                    hello_rps.append(rps)
                else:
                    reader_rps.append(rps)
                    reader_p99.append(p99)
                print(f"round {i + 1} {name:6s} {rps:9.0f} req/s  p99 {p99:6.2f} ms")
    finally:
        for proc in (reader, hello):
            proc.terminate()
            proc.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)

    h, r = statistics.median(hello_rps), statistics.median(reader_rps)
    p99 = statistics.median(reader_p99)
    print(f"starlette hello     median {h:9.0f} req/s")
    print(f"reader page         median {r:9.0f} req/s   p99 median {p99:.2f} ms")
    print(f"ratio reader/hello  {r / h:.2f}   (goal >= 0.80)")
    print(f"p99 at {args.connections} connections  {p99:.2f} ms   (goal <= 10 ms)")
    print(f"first response after start  {first:.2f} s   (goal <= 1.5 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
