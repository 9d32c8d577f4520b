"""Compiling for targets without the hardware: our path's cost, and a newcomer's first HLO.

1. Overhead (default). Per target, in one process: three cold compiles through the
   worker's deviceless path (`workers.run.deviceless.run_deviceless`, its reported trace +
   lower + compile) against three plain `jax.jit(f).lower(*args).compile()` of the same
   function, for the same target, from cleared caches with the persistent cache off,
   alternating (and swapping which goes first) so drift hits both alike, after one
   untimed pass of each that absorbs the process's one-time compiler start-up.
   Prints the medians and their ratio. Goal: ≤ 1.1×.
   (A GPU target's run also writes XLA's dump in a second, untimed compile for the PTX;
   its whole wall time is printed beside the ratio, not in it.)

       .venv/bin/python bench/targets.py [--rounds 3] [--targets v6e:1x1,b200:1]

2. Pallas rows (`--pallas`). Per case (a Pallas kernel, or XLA's own for comparison, on
   v6e, H100 and B200 targets): `--rounds` whole deviceless runs (`run_job`), each in a
   fresh process after one untimed compile of a small other program for the platform.
   Prints the timed compile's median, the median of what the run adds below the HLO
   without timing it (TPU: libtpu's bundle dump, a compile of the exported program in a
   child process; GPU: XLA's dump compile for the PTX, Mosaic GPU's own dump in a child,
   ptxas and cuobjdump for the SASS), and (compile + dump) ÷ compile.

       .venv/bin/python bench/targets.py --pallas [--rounds 3]

3. Newcomer time (`--fresh-clone DIR`). Clones this checkout's HEAD into DIR (which must
   not exist), makes a venv and installs the package with `PIP_NO_CACHE_DIR=1` (a cold
   package cache), starts `boundary serve`, queues the TPU scale card's job
   (`sharded-matmul` on `v6e:2x4`), and stops the clock when the run page shows its HLO
   with the all-reduce. Goal: ≤ 4 minutes.

       .venv/bin/python bench/targets.py --fresh-clone /tmp/boundary-fresh
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "v6e:1x1": ("matmul", {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}, "jax-tpu"),
    "v6e:2x4": (
        "sharded-matmul",
        {"m": 1024, "n": 2048, "k": 4096, "dtype": "bfloat16", "sharding": "tensor"},
        "jax-tpu",
    ),
    "b200:1": ("matmul", {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}, "jax-gpu"),
    "h100:1": ("matmul", {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}, "jax-gpu"),
    "h200:1": ("matmul", {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}, "jax-gpu"),
    "b200:8": (
        "sharded-matmul",
        {"m": 4096, "n": 1024, "k": 8192, "sharding": "tensor"},
        "jax-gpu",
    ),
}


def overhead(targets: list[str], rounds: int) -> None:
    from workers.compiler.jaxenv import apply_jax_environment

    apply_jax_environment()
    import jax
    import jax.numpy as jnp

    from workers.catalog import parse_params
    from workers.catalog.target_rules import apply_target
    from workers.compiler.jaxtyped import shape_dtype_struct
    from workers.protocol import JobSpec, parse_target
    from workers.run.deviceless import run_deviceless
    from workers.scale.prepare import prepare as prepare_scale
    from workers.workloads import get_workload
    from workers.xla_targets.topology import target_devices

    def plain(job: JobSpec, params: Any, devices: list[Any]) -> float:
        workload = get_workload(job.workload)
        jax.clear_caches()
        jax.config.update("jax_enable_compilation_cache", False)
        scaled = prepare_scale(workload, params, devices)
        if scaled is None:
            sharding = jax.sharding.SingleDeviceSharding(devices[0])
            args = [
                shape_dtype_struct(s.shape, jnp.dtype(s.dtype), sharding=sharding)
                for s in workload.input_specs(params)
            ]
            fn = jax.jit(workload.function(params))
        else:
            fn, args = scaled.jitted, scaled.abstract
        t0 = time.perf_counter()
        fn.lower(*args).compile()
        return time.perf_counter() - t0

    print(
        f"{'target':<9} {'workload':<15} {'ours (median)':>14} {'plain':>10} {'ratio':>7}  "
        "whole run (incl. dump)"
    )
    for target_id in targets:
        workload_name, raw, path = CASES[target_id]
        job = apply_target(
            JobSpec.model_validate(
                {
                    "workload": workload_name,
                    "path": path,
                    "params": raw,
                    "target": target_id,
                    "stages": ["compile"],
                }
            )
        )
        params = parse_params(job.workload, job.params)
        target = parse_target(target_id)
        devices = list(target_devices(target))
        ours: list[float] = []
        walls: list[float] = []
        base: list[float] = []
        # One untimed pass of each first: the process's one-time start-up of the compiler
        # (libtpu, the CUDA plugin) is no part of a cold compile of this program.
        plain(job, params, devices)
        run_deviceless(job, params, target)
        for i in range(rounds):
            if i % 2:
                base.append(plain(job, params, devices))
            t0 = time.perf_counter()
            run = run_deviceless(job, params, target)
            walls.append(time.perf_counter() - t0)
            s = run.stage_seconds
            ours.append((s.trace or 0) + (s.lower or 0) + (s.compile or 0))
            if not i % 2:
                base.append(plain(job, params, devices))
        mo, mb = statistics.median(ours), statistics.median(base)
        print(
            f"{target_id:<9} {workload_name:<15} {mo * 1e3:>11.0f} ms {mb * 1e3:>7.0f} ms "
            f"{mo / mb:>6.2f}×  {statistics.median(walls) * 1e3:.0f} ms"
        )


MATMUL_1024 = {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}
PALLAS = {**MATMUL_1024, "kernel": "pallas"}
PALLAS_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("v6e:1x1", "matmul", PALLAS),
    ("v6e:1x1", "matmul", MATMUL_1024),
    (
        "v6e:1x1",
        "attention",
        {"batch": 2, "heads": 4, "seq_len": 1024, "head_dim": 128, "causal": True,
         "dtype": "bfloat16", "kernel": "pallas"},
    ),
    (
        "v6e:2x4",
        "sharded-matmul",
        {"m": 2048, "n": 2048, "k": 2048, "dtype": "bfloat16", "sharding": "tensor",
         "kernel": "pallas"},
    ),
    ("h100:1", "matmul", PALLAS),
    ("b200:1", "matmul", PALLAS),
    ("b200:1", "matmul", {**PALLAS, "pallas_backend": "mosaic-gpu"}),
    ("b200:1", "matmul", MATMUL_1024),
]  # fmt: skip
"""(target, workload, parameters) of each Pallas row; the XLA rows show the same dumps'
cost for XLA's own kernels."""
DUMP_PARTS = ("bundle_dump", "dump_compile", "mosaic_gpu_dump", "sass")
"""The untimed work a deviceless run adds below the HLO, as `extra.unreported_s` names it."""


WARM_UP: dict[str, dict[str, Any]] = {
    "jax-tpu": {"workload": "matmul", "params": {"m": 256, "n": 256, "k": 256}},
    "jax-gpu": {"workload": "elementwise", "params": {"n": 4096}},
}
"""A small, different program each row's process compiles first, untimed: the compiler's
start-up (and the first dump child's) is no part of the row."""


def pallas_row(index: int) -> None:
    """One round of one Pallas row, in this fresh process: `{compile, dump}` as JSON.

    Each round has its own process because Mosaic GPU caches compiled kernels in the
    process (a second compile of the same kernel skips its compiler), and a fresh process
    is also what a new kind of job meets on a worker."""
    import json

    from workers.compiler.jaxenv import apply_jax_environment

    apply_jax_environment()
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    target, workload, params = PALLAS_CASES[index]
    path = "jax-tpu" if target.startswith("v6e") else "jax-gpu"
    first = {**WARM_UP[path], "path": path, "target": target.split(":")[0] + ":1"}
    if target.startswith("v6e"):
        first["target"] = "v6e:1x1"
    run_job(JobSpec.model_validate(first))
    job = {"workload": workload, "path": path, "target": target, "params": params}
    run = run_job(JobSpec.model_validate(job))
    spent = run.extra.get("unreported_s") or {}
    dump = sum(float(spent.get(k, 0.0)) for k in DUMP_PARTS)
    print(json.dumps({"compile": run.stage_seconds.compile, "dump": dump}))


def pallas_rows(rounds: int) -> None:
    import json

    print(
        f"{'target':<8} {'workload':<15} {'kernel':<11} {'compile':>9} {'dump':>9} "
        f"{'(compile + dump) ÷ compile':>27}"
    )
    for index, (target, workload, params) in enumerate(PALLAS_CASES):
        compiles: list[float] = []
        dumps: list[float] = []
        for _ in range(rounds):
            done = subprocess.run(
                [sys.executable, __file__, "--pallas-row", str(index)],
                capture_output=True,
                text=True,
                check=True,
            )
            found = json.loads(done.stdout.strip().splitlines()[-1])
            compiles.append(found["compile"])
            dumps.append(found["dump"])
        compile_s, dump_s = statistics.median(compiles), statistics.median(dumps)
        kernel = params.get("pallas_backend") or (
            "pallas" if params.get("kernel") == "pallas" else "xla"
        )
        print(
            f"{target:<8} {workload:<15} {kernel:<11} {compile_s * 1e3:>6.0f} ms "
            f"{dump_s * 1e3:>6.0f} ms {(compile_s + dump_s) / compile_s:>26.1f}×",
            flush=True,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fresh_clone(folder: Path) -> None:
    import httpx

    if folder.exists():
        raise SystemExit(f"{folder} exists: give a folder that does not")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOUNDARY_", "VIRTUAL_ENV"))}
    env["PIP_NO_CACHE_DIR"] = "1"
    marks: list[tuple[str, float]] = []
    start = time.monotonic()

    def mark(what: str) -> None:
        marks.append((what, time.monotonic() - start))
        print(f"{marks[-1][1]:7.1f} s  {what}", flush=True)

    subprocess.run(["git", "clone", "-q", str(ROOT), str(folder)], check=True)
    mark("cloned")
    subprocess.run(["python3", "-m", "venv", str(folder / ".venv")], check=True, env=env)
    subprocess.run(
        [str(folder / ".venv/bin/pip"), "install", "-q", "-e", "."], cwd=folder, check=True, env=env
    )
    mark("installed (pip install -e ., cold package cache)")
    port = _free_port()
    env["BOUNDARY_DB"] = str(folder / "var/bench.sqlite3")
    server = subprocess.Popen(
        [str(folder / ".venv/bin/boundary"), "serve", "--port", str(port)],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            while True:
                try:
                    workers = client.get("/api/v1/workers").json()["data"]
                except httpx.TransportError:
                    workers = []
                if any("v6e:2x4" in (w.get("targets") or []) for w in workers):
                    break
                time.sleep(0.2)
            mark("server up, a worker offers v6e:2x4")
            body = {
                "workload": "sharded-matmul",
                "path": "jax-tpu",
                "target": "v6e:2x4",
                "params": {
                    "m": 1024,
                    "n": 2048,
                    "k": 4096,
                    "dtype": "bfloat16",
                    "mesh": "2x4",
                    "axes": "data,model",
                    "sharding": "custom",
                    "a_spec": "data,model",
                    "b_spec": "model,-",
                    "out_spec": "data,-",
                },
            }
            job = client.post("/api/v1/jobs", json=body).json()
            while True:
                page = client.get(f"/runs/{job['id']}").text
                if (
                    "all-reduce" in page
                    and "T(8,128)" in client.get(f"/runs/{job['id']}/ir/hlo").text
                ):
                    break
                time.sleep(0.2)
            mark("the run page shows the v6e:2x4 HLO with its all-reduce")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    total = marks[-1][1]
    print(f"fresh clone → first v6e HLO on the page: {total / 60:.1f} min (goal ≤ 4 min)")
    size = subprocess.run(
        ["du", "-sh", str(folder / ".venv")], check=False, capture_output=True, text=True
    )
    print(f"venv: {size.stdout.split()[0] if size.stdout else '?'}")
    shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--targets", default=",".join(CASES))
    parser.add_argument("--fresh-clone", type=Path, default=None)
    parser.add_argument("--pallas", action="store_true", help="the Pallas rows (see above)")
    parser.add_argument("--pallas-row", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pallas_row is not None:
        pallas_row(args.pallas_row)
        return
    if args.fresh_clone is not None:
        fresh_clone(args.fresh_clone)
        return
    if args.pallas:
        pallas_rows(args.rounds)
        return
    wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in CASES]
    if unknown:
        raise SystemExit(f"--targets: no case for {', '.join(unknown)} (cases: {', '.join(CASES)})")
    overhead(wanted, args.rounds)


if __name__ == "__main__":
    main()
