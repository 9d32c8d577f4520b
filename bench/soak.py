"""Soak: many small jobs and uploads against a server with small retention caps, to show
that its storage stays bounded; then thousands of half-open connections and event
streams, to show that its memory, its open files and /healthz stay bounded.

Starts a server (uvicorn, as `boundary serve` runs it, no local worker) on a fresh
database with small caps, then, at once:

- submits `--jobs` small jobs, which a worker played by this script leases and finishes
  over HTTP with a result carrying `--ir-kib` of IR text (no JAX: this measures the
  server's storage, not a runner);
- uploads `--uploads` distinct .npz archives of `--upload-kib` each.

It then waits one retention interval and prints the database's bytes (file and WAL)
and the stored files' bytes against their bounds, and the finished jobs kept against
RETAIN_RUNS. The database's bound is the files' cap plus, per kept job, a budget of
twice its IR text and 64 KiB of rows, plus the WAL's size limit.

Then (bench/netsoak.py) `--half-open` slowloris connections and `--streams` event
streams from 20 client addresses (127.0.0.2 …) against `boundary serve` with its
defaults, for `--seconds`: the server's memory, its open files, and /healthz's status
and latency timed from another process. The soak raises its own RLIMIT_NOFILE.

    .venv/bin/python bench/soak.py [--jobs 2000] [--uploads 100] [--half-open 5000]
                                   [--streams 1000] [--seconds 30] [--only storage|connections]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
from netload import stop

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "soak-worker-token-0123456789"
JOB: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64, "dtype": "float32"},
    "measure": {"samples": 5},
}
ROW_BUDGET = 64 * 1024
WAL_LIMIT = 4 * 1024 * 1024  # app.store.sqlite.WAL_LIMIT_BYTES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def npz(seed: int, kib: int) -> bytes:
    """An .npz whose one array, arg0, is `kib` KiB of bytes that differ per seed."""
    body = (seed.to_bytes(4, "little") * (kib * 256))[: kib * 1024]
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({len(body)},), }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + body
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("arg0.npy", npy)
    return buffer.getvalue()


def result(spec: dict[str, Any], ir: str) -> dict[str, Any]:
    return {
        "job": spec,
        "params": spec["params"],
        "stage_seconds": {"trace": 0.001, "lower": 0.004, "compile": 0.01},
        "artifacts": {"jaxpr": "{ lambda ; a b. }", "stablehlo": "module {}", "hlo": ir},
        "measurements": [{"boundary": "host-sync", "samples_s": [0.001] * 5, "stats": None}],
        "correctness": {"passed": True, "error": 1e-7, "tolerance": 1e-5},
        "environment": {
            "platform": "cpu",
            "device_kind": "cpu",
            "device_count": 1,
            "jax_version": "0.10.2",
            "jaxlib_version": "0.10.2",
            "timestamp": "2026-11-01T00:00:00+00:00",
        },
        "valid": True,
    }


async def work(client: httpx.AsyncClient, total: int, ir: str, done: list[int]) -> None:
    """Be a worker: register, then lease and finish jobs until `total` are done."""
    from workers.catalog import CATALOG_VERSION
    from workers.protocol import PROTOCOL_VERSION

    auth = {"Authorization": f"Bearer {TOKEN}"}
    caps = {
        "platform": "cpu",
        "device_kind": "cpu",
        "device_count": 1,
        "max_virtual_devices": 8,
        "paths": ["jax-cpu"],
        "jax_version": "0.10.2",
        "protocol_version": PROTOCOL_VERSION,
        "catalog_version": CATALOG_VERSION,
    }
    r = await client.post("/api/v1/worker/register", json={"capabilities": caps}, headers=auth)
    me = {k: r.json()[k] for k in ("worker_id", "worker_key")}
    while done[0] < total:
        r = await client.post("/api/v1/worker/lease", json={**me, "wait_s": 1.0}, headers=auth)
        if r.status_code == 204:
            continue
        grant = r.json()
        report = {
            **me,
            "job_id": grant["job_id"],
            "lease_id": grant["lease_id"],
            "result": result(grant["spec"], ir),
            "run_seconds": 0.01,
        }
        posted = await client.post("/api/v1/worker/result", json=report, headers=auth)
        if posted.status_code != 200:
            raise SystemExit(f"result refused: {posted.status_code} {posted.text[:200]}")
        done[0] += 1


async def submit(client: httpx.AsyncClient, total: int, queue_room: int, done: list[int]) -> None:
    sent = 0
    while sent < total:
        if sent - done[0] >= queue_room:  # keep under the queue's cap
            await asyncio.sleep(0.01)
            continue
        r = await client.post("/api/v1/jobs", json=JOB)
        if r.status_code != 202:
            raise SystemExit(f"submission refused: {r.status_code} {r.text[:200]}")
        sent += 1


async def upload(client: httpx.AsyncClient, count: int, kib: int) -> None:
    for i in range(count):
        r = await client.post(
            "/api/v1/artifacts",
            params={"kind": "npz"},
            content=npz(i, kib),
            headers={"Content-Type": "application/octet-stream"},
        )
        if r.status_code != 201:
            raise SystemExit(f"upload refused: {r.status_code} {r.text[:200]}")


def db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--uploads", type=int, default=100)
    parser.add_argument("--upload-kib", type=int, default=256)
    parser.add_argument("--ir-kib", type=int, default=16)
    parser.add_argument("--retain-runs", type=int, default=100)
    parser.add_argument("--files-max-mib", type=int, default=4)
    parser.add_argument("--half-open", type=int, default=5000)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--only", choices=["storage", "connections"])
    args = parser.parse_args()
    if args.only != "connections":
        storage_soak(args)
    if args.only != "storage":
        connections(args)


def connections(args: argparse.Namespace) -> None:
    from netsoak import Load, connection_soak

    load = Load(half_open=args.half_open, streams=args.streams, seconds=args.seconds)
    found = connection_soak(load)
    print(
        f"{load.half_open:,} half-open connections and {load.streams:,} event streams from "
        f"20 addresses, {load.seconds:g} s"
    )
    print(f"  streams answered     {found['streams']}")
    print(f"  half-open held       {found['half_open_held_median']:,} (median)")
    print(f"  half-open ended      {found['half_open_endings']}")
    print(
        f"  server RSS           {found['rss_idle_mib']} MiB idle, {found['rss_max_mib']} MiB max"
    )
    print(f"  server open files    {found['server_fds_max']:,} max")
    healthz = found["healthz_s"]
    print(
        f"  /healthz             {found['healthz_status']}; median {healthz['median']} s, "
        f"p95 {healthz['p95']} s, max {healthz['max']} s"
    )


def storage_soak(args: argparse.Namespace) -> None:

    tmp = Path(tempfile.mkdtemp(prefix="boundary-soak-"))
    db = tmp / "soak.sqlite3"
    port = free_port()
    files_cap = args.files_max_mib * 1024 * 1024
    prune_s = 2.0
    env = {
        **os.environ,
        "BOUNDARY_DB": str(db),
        "BOUNDARY_WORKER_TOKEN": TOKEN,
        "BOUNDARY_SUBMIT_RATE": "1000000",
        "BOUNDARY_MAX_QUEUE_PER_CLIENT": "1000",
        "BOUNDARY_RETAIN_RUNS": str(args.retain_runs),
        "BOUNDARY_FILES_MAX_BYTES": str(files_cap),
        "BOUNDARY_PRUNE_INTERVAL_S": str(prune_s),
    }
    logs = open(tmp / "server.log", "wb")  # noqa: SIM115 - closed in finally
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app",
         "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=logs, stderr=subprocess.STDOUT,
    )  # fmt: skip
    ir = "HloModule soak\n" + "x" * (args.ir_kib * 1024)

    async def soak() -> tuple[float, int]:
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits
        ) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start")
                await asyncio.sleep(0.1)
            started = time.monotonic()
            done = [0]
            halfway = 0
            jobs = asyncio.gather(
                work(client, args.jobs, ir, done),
                submit(client, args.jobs, 200, done),
                upload(client, args.uploads, args.upload_kib),
            )
            while not jobs.done():
                await asyncio.sleep(0.5)
                if not halfway and done[0] >= args.jobs // 2:
                    halfway = db_bytes(db)
            await jobs
            return time.monotonic() - started, halfway

    try:
        elapsed, halfway = asyncio.run(soak())
        time.sleep(prune_s + 1.0)  # one retention pass after the last job
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            files = conn.execute("SELECT coalesce(sum(size), 0), count(*) FROM files").fetchone()
            jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
            events = conn.execute("SELECT count(*) FROM job_events").fetchone()[0]
        bound = files_cap + args.retain_runs * (2 * len(ir) + ROW_BUDGET) + WAL_LIMIT
        now = db_bytes(db)
        print(
            f"{args.jobs} jobs ({args.ir_kib} KiB IR each) and {args.uploads} uploads "
            f"({args.upload_kib} KiB each) in {elapsed:.1f} s"
        )
        print(f"  jobs kept          {jobs:>12,}   cap RETAIN_RUNS {args.retain_runs:,}")
        print(f"  job events kept    {events:>12,}")
        print(f"  stored files bytes {files[0]:>12,}   cap FILES_MAX_BYTES {files_cap:,}")
        print(f"    ({files[1]} files of {args.uploads} uploaded)")
        print(f"  database bytes     {now:>12,}   bound {bound:,} ({now / bound:.0%})")
        print(f"    (at half the jobs: {halfway:,})")
        ok = files[0] <= files_cap and now <= bound and jobs <= args.retain_runs
        print("  bounded" if ok else "  NOT BOUNDED")
        if not ok:
            raise SystemExit(1)
    finally:
        stop(server, signal.SIGTERM)
        logs.close()


if __name__ == "__main__":
    main()
