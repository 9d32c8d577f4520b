"""What the server and a worker add to a run on a real chip: submit → done over a unix
socket, against the same run made in-process as `boundary run` makes it.

`boundary serve --uds` and a `boundary worker --server unix:…` (which holds the chip) are
started; a 4096³ bfloat16 matmul (20 samples) is submitted through the API `--runs` times
and each is timed from the POST to the moment the API first reports it done (polled every
50 ms). Then the worker is stopped, which frees the chip, and this process runs the same
job with the engine `--runs` times, each timed around `run_job`. The first in-process run
opens the chip and is left out of the median, as the worker's warm runner had opened it
before the first submission. The ratio is socket / in-process.

Run on the chip's host (no TCP needed): `python3 bench/device/socket_overhead.py`.
`--cpu` checks the script on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workers.export.server_address import ServerAddress  # noqa: E402

TOKEN = "socket-overhead-bench-token-0123456789"
PREDICTION = {"BOUNDARY_CHIP_PREDICTION": "off"}
"""Both sides time only the run's own compile and execute (workers.run.prediction)."""


def job(path: str, size: int) -> dict[str, object]:
    return {
        "workload": "matmul",
        "path": path,
        "params": {"m": size, "n": size, "k": size, "dtype": "bfloat16"},
        "measure": {"samples": 20},
    }


def start(tmp: Path, socket: Path, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    base = {**os.environ, **env, "BOUNDARY_WORKER_TOKEN": TOKEN}
    serve = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--uds", str(socket), "--workers", "0"],
        cwd=ROOT, stdout=(tmp / "serve.log").open("wb"), stderr=subprocess.STDOUT,
        env={**base, "BOUNDARY_DB": str(tmp / "db.sqlite3"), "BOUNDARY_FILES_DIR": str(tmp / "f")},
    )  # fmt: skip
    server = ServerAddress.parse(f"unix:{socket}")
    deadline = time.monotonic() + 120
    while True:
        try:
            with server.client(timeout=1) as client:
                if client.get("/healthz").status_code == 200:
                    break
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if time.monotonic() > deadline or serve.poll() is not None:
            raise SystemExit("the server did not come up")
        time.sleep(0.1)
    worker = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", "--server", f"unix:{socket}", "--name", "chip"],
        cwd=ROOT, stdout=(tmp / "worker.log").open("wb"), stderr=subprocess.STDOUT, env=base,
    )  # fmt: skip
    return [serve, worker]


def over_socket(socket: Path, body: dict[str, object], runs: int) -> list[float]:
    server = ServerAddress.parse(f"unix:{socket}")
    walls = []
    with server.client(timeout=600) as client:
        deadline = time.monotonic() + 300
        while not client.get("/api/v1/workers").json()["data"]:
            if time.monotonic() > deadline:
                raise SystemExit("no worker registered")
            time.sleep(0.2)
        for _ in range(runs + 1):  # the first warms the worker's runner: left out
            t0 = time.perf_counter()
            job_id = client.post("/api/v1/jobs", json=body).json()["id"]
            while client.get(f"/api/v1/jobs/{job_id}").json()["status"] not in ("done", "failed"):
                time.sleep(0.05)
            walls.append(time.perf_counter() - t0)
    return walls[1:]


def in_process(body: dict[str, object], runs: int) -> list[float]:
    from workers.compiler.jaxenv import apply_jax_environment

    apply_jax_environment()
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    walls = []
    for _ in range(runs + 1):  # the first opens the chip: left out
        t0 = time.perf_counter()
        run_job(JobSpec.model_validate(body))
        walls.append(time.perf_counter() - t0)
    return walls[1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    path, size = ("jax-cpu", 512) if args.cpu else ("jax-tpu", 4096)
    env = {**PREDICTION, **({"BOUNDARY_JAX_PLATFORMS": "cpu"} if args.cpu else {})}
    os.environ.update(PREDICTION)
    body = job(path, size)
    with tempfile.TemporaryDirectory(prefix="bso-") as name:
        tmp = Path(name)
        procs = start(tmp, tmp / "b.sock", env)
        try:
            socket_walls = over_socket(tmp / "b.sock", body, args.runs)
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(timeout=60)
    local_walls = in_process(body, args.runs)
    row = {
        "job": f"matmul {size}³ bfloat16, 20 samples, on {path}",
        "socket_s": socket_walls,
        "in_process_s": local_walls,
        "socket_median_s": statistics.median(socket_walls),
        "in_process_median_s": statistics.median(local_walls),
    }
    row["ratio"] = row["socket_median_s"] / row["in_process_median_s"]  # type: ignore[operator]
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
