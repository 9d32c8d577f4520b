"""Boundary's big matmuls on a real chip against a plain JAX loop, in one process.

For each size (8192³ and 16384³ bfloat16 by default) and each mode, the job runs through
`boundary run`'s engine with default settings (its byte cap, its sampling, its check), and
a plain loop times the same program on the same chip right after: `jax.jit(jnp.matmul)`
over random bfloat16 inputs already on the device, one `block_until_ready` per call for
latency, one per K calls for throughput (K as the job's default `calls_per_sample`). Each
side's median gives TFLOP/s; the ratio Boundary / plain must be at least 0.97.

Run on the chip's host: `python3 bench/device/matmul_vs_plain.py [--sizes 8192,16384]`.
With `--cpu` it runs on the CPU at small sizes, to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.compiler.jaxenv import apply_jax_environment

apply_jax_environment()
os.environ.setdefault("BOUNDARY_CHIP_PREDICTION", "off")  # only the run's own cost is timed

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from workers.protocol import BoundaryId, JobSpec, MeasureOptions, RunResult  # noqa: E402
from workers.run.engine import run_job  # noqa: E402

GOAL = 0.97


def plain_loop(size: int, mode: str, samples: int, calls: int) -> list[float]:
    """Per-call seconds of a bare loop: each sample one call (latency) or `calls` calls
    with one sync (throughput, divided by `calls`)."""
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((size, size), dtype=np.float32), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((size, size), dtype=np.float32), jnp.bfloat16)
    f = jax.jit(jnp.matmul)
    f(a, b).block_until_ready()
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        if mode == "latency":
            f(a, b).block_until_ready()
            out.append(time.perf_counter() - t0)
        else:
            results = [f(a, b) for _ in range(calls)]
            jax.block_until_ready(results)
            out.append((time.perf_counter() - t0) / calls)
    return out


def boundary_run(size: int, mode: str, path: str) -> RunResult:
    job = JobSpec(
        workload="matmul",
        path=path,
        params={"m": size, "n": size, "k": size, "dtype": "bfloat16"},
        measure=MeasureOptions(mode=mode),
    )
    return run_job(job)


def one(size: int, mode: str, path: str) -> dict[str, object]:
    run = boundary_run(size, mode, path)
    boundary = BoundaryId.HOST_SYNC if mode == "latency" else BoundaryId.HOST_THROUGHPUT
    main = next((m for m in run.measurements if m.boundary is boundary), None)
    flops = 2.0 * size**3
    row: dict[str, object] = {"size": size, "mode": mode, "valid": run.valid}
    if main is None or main.stats is None:
        row["error"] = (run.correctness.detail if run.correctness else None) or run.warnings
        return row
    samples = max(len(main.samples_s), 10)
    plain = plain_loop(size, mode, samples, main.calls_per_sample)
    ours, theirs = main.stats.median, statistics.median(plain)
    device = next((m for m in run.measurements if m.boundary is BoundaryId.DEVICE_TIME), None)
    row.update(
        boundary_ms=ours * 1e3,
        plain_ms=theirs * 1e3,
        boundary_tflops=flops / ours / 1e12,
        plain_tflops=flops / theirs / 1e12,
        ratio=theirs / ours,
        samples=len(main.samples_s),
        calls_per_sample=main.calls_per_sample,
        device_ms=device.stats.median * 1e3 if device and device.stats else None,
        check=f"{run.correctness.error:.3g} <= {run.correctness.tolerance:.3g}"
        if run.correctness and run.correctness.error is not None
        else None,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8192,16384")
    parser.add_argument("--modes", default="latency,throughput")
    parser.add_argument("--cpu", action="store_true", help="check the script on the CPU")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    path = "jax-cpu" if args.cpu else "jax-tpu"
    if args.cpu:
        sizes = [min(s, 256) for s in sizes]
    rows = []
    for size in sizes:
        for mode in args.modes.split(","):
            row = one(size, mode, path)
            rows.append(row)
            print(json.dumps(row), flush=True)
    failed = [r for r in rows if not r.get("valid") or float(r.get("ratio", 0)) < GOAL]  # type: ignore[arg-type]
    print(f"{len(rows) - len(failed)} of {len(rows)} at or above {GOAL} of the plain loop")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if args.cpu or not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
