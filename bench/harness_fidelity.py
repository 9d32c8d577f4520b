"""Harness fidelity: does the harness measure what a bare hand-written loop measures?

For one compiled matmul in one process, the harness's host-sync samples and a bare loop's
samples are taken in interleaved blocks (harness, bare, bare, harness, ...) so that drift
in the machine's speed falls on both alike. The ratio of their medians should lie within
3% of 1 at 1024×1024×1024 float32 and within 10% at 64×64×64.

Then the harness's own cost per job: the wall time of `run_job` outside every interval it
reports, for a small job where the workload's own untimed work (inputs, reference,
warm-up) is negligible, with its breakdown.

Run: .venv/bin/python bench/harness_fidelity.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.compiler.jaxenv import apply_jax_environment

apply_jax_environment()  # JAX_PLATFORMS and libtpu's settings, before jax is imported

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from workers.measure.harness import CompiledCall, sample_latency  # noqa: E402
from workers.protocol import JobSpec, MeasureOptions  # noqa: E402
from workers.run.engine import run_job  # noqa: E402


def bare_loop(call: CompiledCall, a: jax.Array, b: jax.Array, count: int) -> list[float]:
    """The simplest honest latency loop: time one call until its result is ready."""
    clock = time.perf_counter
    times = []
    for _ in range(count):
        t0 = clock()
        call(a, b).block_until_ready()
        times.append(clock() - t0)
    return times


def fidelity(size: int, blocks: int, per_block: int) -> tuple[float, float, float]:
    """Harness median, bare median and their ratio for a size³ float32 matmul."""
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((size, size), dtype=np.float32) for _ in range(2)]
    a, b = (jax.device_put(x) for x in host)
    compiled = jax.jit(jnp.matmul).lower(a, b).compile()
    for _ in range(3):
        compiled(a, b).block_until_ready()
    options = MeasureOptions(samples=per_block, max_seconds=600)
    harness: list[float] = []
    bare: list[float] = []
    for block in range(blocks):
        # ABBA order: each side goes first as often as it goes second.
        if block % 2 == 0:
            harness += sample_latency(compiled, [a, b], options).measurements[0].samples_s
            bare += bare_loop(compiled, a, b, per_block)
        else:
            bare += bare_loop(compiled, a, b, per_block)
            harness += sample_latency(compiled, [a, b], options).measurements[0].samples_s
    h, r = statistics.median(harness), statistics.median(bare)
    return h, r, h / r


def fixed_cost(runs: int) -> tuple[float, dict[str, float]]:
    """Median time outside the reported intervals for a 64³ matmul job, with its parts."""
    job = JobSpec.model_validate(
        {"workload": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "measure": {"samples": 20}}
    )
    run_job(job)  # the first job in a process also pays for one-time imports
    results = [run_job(job) for _ in range(runs)]
    costs = [r.harness_seconds or 0.0 for r in results]
    middle = results[costs.index(sorted(costs)[len(costs) // 2])]
    return statistics.median(costs), dict(middle.extra["unreported_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer blocks (a smoke run)")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; interleaved ABBA blocks")
    cases = [(1024, 80 // scale, 4, 0.03), (64, 40 // scale, 250, 0.10)]
    for size, blocks, per_block, limit in cases:
        h, r, ratio = fidelity(size, blocks, per_block)
        verdict = "ok" if abs(ratio - 1) <= limit else "OUT OF BOUNDS"
        print(
            f"{size}x{size}x{size} float32: harness median {h * 1e6:.1f} us, "
            f"bare loop median {r * 1e6:.1f} us, ratio {ratio:.4f} "
            f"(limit ±{limit:.0%}, {blocks * per_block} samples each) {verdict}"
        )
    cost, parts = fixed_cost(9 if not args.quick else 3)
    verdict = "ok" if cost <= 0.020 else "OVER 20 ms"
    print(f"harness fixed cost per job (64x64x64, 20 samples): {cost * 1e3:.2f} ms {verdict}")
    print("  of which: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in parts.items()))


if __name__ == "__main__":
    main()
