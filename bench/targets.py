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

2. Exported programs (`--exported`). The tests' own three programs
   (tests/workers/own_model.py: a transformer forward, an optax train step, that step over
   8 devices), exported with `boundary export-fn --example`, each compiled per target
   through the worker's path (bind, placement from the export, trace, lower, the source
   tags, compile; printing the IR is left out, as in the catalog's rows) against a plain
   `jax.jit(exp.call).lower(*args, **kwargs).compile()` on
   the same devices, alternating, from cleared caches, `--rounds` of each after an
   untimed pass. On this loaded machine wall time says more about the neighbours than
   about either path, so the medians are in CPU seconds of this process and its children
   (ptxas), wall seconds beside them. Also prints both peaks per device. Goal: ≤ 1.1×.

       .venv/bin/python bench/targets.py --exported [--rounds 5]

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


EXPORTED_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("forward", ("v6e:1x1", "v6e:2x4", "b200:1", "h100:8")),
    ("train", ("v6e:1x1", "v6e:2x4", "b200:1", "h100:8")),
    ("dp", ("v6e:2x4", "h100:8", "b200:8", "v6e:4x4")),
)


def _cpu() -> float:
    """CPU seconds of this process and its children (a GPU compile runs ptxas)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def exported_overhead(rounds: int) -> None:
    import tempfile

    from workers.compiler.jaxenv import apply_jax_environment

    apply_jax_environment()
    import jax

    from tests.workers.own_exports import export_program
    from workers.catalog import parse_params
    from workers.catalog.target_rules import COMPILE_ONLY_CAP
    from workers.compiler.jaxtyped import clear_caches
    from workers.compiler.source_tags import tag_module
    from workers.export.meshes import argument_shardings
    from workers.files import FileCache
    from workers.protocol import JobSpec, parse_target
    from workers.run.base import emitter
    from workers.run.stages import bind_workload, placed_inputs, trace_and_lower
    from workers.xla_targets.topology import target_devices

    folder = Path(tempfile.mkdtemp(prefix="boundary-bench-exported-"))
    files = FileCache(folder / "files")

    def ours(job: JobSpec, devices: list[Any]) -> tuple[float, float, int]:
        clear_caches()
        c0, w0 = _cpu(), time.perf_counter()
        params = parse_params(job.workload, job.params)
        workload = bind_workload(job, params, files.directory, COMPILE_ONLY_CAP)
        abstract, _ = placed_inputs(workload, params, devices)
        staged = trace_and_lower(jax.jit(workload.function(params)), abstract, emitter(None))
        tag_module(staged.lowered.compiler_ir("stablehlo"))  # what the worker adds
        compiled = staged.lowered.compile()
        peak = int(compiled.memory_analysis().peak_memory_in_bytes)
        return _cpu() - c0, time.perf_counter() - w0, peak

    def plain(exp: Any, devices: list[Any]) -> tuple[float, float, int]:
        clear_caches()
        c0, w0 = _cpu(), time.perf_counter()
        structs = [
            jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
            for a, s in zip(exp.in_avals, argument_shardings(exp, devices), strict=True)
        ]
        args, kwargs = jax.tree.unflatten(exp.in_tree, structs)
        compiled = jax.jit(exp.call).lower(*args, **kwargs).compile()
        peak = int(compiled.memory_analysis().peak_memory_in_bytes)
        return _cpu() - c0, time.perf_counter() - w0, peak

    print(
        f"{'artifact':<8} {'target':<8} {'ours CPU':>9} {'plain CPU':>10} {'ratio':>6}  "
        f"{'ours wall':>9} {'plain wall':>10} {'ratio':>6}  peak ours / plain (bytes)"
    )
    for name, targets in EXPORTED_ROWS:
        made = export_program(name, folder)
        data = made.artifact.read_bytes()
        digest = files.put(data)
        exp = jax.export.deserialize(bytearray(data))
        for target_id in targets:
            target = parse_target(target_id)
            devices = list(target_devices(target))
            job = JobSpec.model_validate(
                {
                    "workload": "exported",
                    "path": "jax-tpu" if target_id.startswith("v6e") else "jax-gpu",
                    "target": target_id,
                    "stages": ["compile"],
                    "params": {"artifact": digest},
                }
            )
            ours(job, devices)  # untimed: the compiler's own start-up for this program
            plain(exp, devices)
            mine: list[tuple[float, float, int]] = []
            theirs: list[tuple[float, float, int]] = []
            for i in range(rounds):  # alternating, each going first in turn
                if i % 2:
                    theirs.append(plain(exp, devices))
                mine.append(ours(job, devices))
                if not i % 2:
                    theirs.append(plain(exp, devices))
            med = statistics.median
            oc, pc = med(m[0] for m in mine), med(t[0] for t in theirs)
            ow, pw = med(m[1] for m in mine), med(t[1] for t in theirs)
            print(
                f"{name:<8} {target_id:<8} {oc:>8.3f}s {pc:>9.3f}s {oc / pc:>5.2f}×  "
                f"{ow:>8.3f}s {pw:>9.3f}s {ow / pw:>5.2f}×  {mine[0][2]:,} / {theirs[0][2]:,}",
                flush=True,
            )
    shutil.rmtree(folder, ignore_errors=True)


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
        [str(folder / ".venv/bin/pip"), "install", "-q", "-e", ".[server]"],
        cwd=folder,
        check=True,
        env=env,
    )
    mark("installed (pip install -e .[server], cold package cache)")
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
    parser.add_argument("--exported", action="store_true", help="the exported programs' rows")
    args = parser.parse_args()
    if args.fresh_clone is not None:
        fresh_clone(args.fresh_clone)
        return
    if args.exported:
        exported_overhead(args.rounds)
        return
    wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in CASES]
    if unknown:
        raise SystemExit(f"--targets: no case for {', '.join(unknown)} (cases: {', '.join(CASES)})")
    overhead(wanted, args.rounds)


if __name__ == "__main__":
    main()
