"""The catalog's peak-memory model (workers.catalog.peak) against what a real runner uses.

    .venv/bin/python bench/peak_model.py                      # the default set, jax-cpu
    .venv/bin/python bench/peak_model.py --path jax-tpu m=8192,n=8192,k=8192,dtype=bfloat16
    .venv/bin/python bench/peak_model.py attention:batch=1,heads=2,seq_len=4096

Each job runs on a fresh runner (`python -m workers.agent.runner`, as a worker starts it),
warmed by one small matmul first (the CPU client made), its peak resident memory reset
just before the job. Printed per job: the model's estimate (`WorkloadParams.peak`), the
measured peak over the warm runner's resident memory, and their ratio; with the phase the
model says the peak happens in. A job is `[WORKLOAD:]key=value,...` (a matmul unless it
names another workload); `K=` sets throughput mode with K calls per sample.

On an accelerator the placed inputs and the outputs alive while sampling live in the
device's memory, which the model counts as host memory (as it is on jax-cpu): there the
measured figure is expected below the estimate.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workers.agent.memory import read_status, reset_peak  # noqa: E402
from workers.agent.runner_pool import RunnerPool  # noqa: E402
from workers.catalog import parse_params  # noqa: E402
from workers.protocol import JobSpec  # noqa: E402
from workers.protocol.sizes import byte_text  # noqa: E402

DEFAULT_SET = [
    "m=16384,n=16384,k=64,dtype=float32",  # projected; the output dominates
    "m=64,n=8192,k=16384,dtype=float32",  # projected; the inputs dominate
    "m=8192,n=8192,k=256,dtype=float32",  # projected, just over the exact check's limit
    "m=8192,n=8192,k=256,dtype=float32,K=3",  # the same, three outputs alive while sampling
    "m=4096,n=4096,k=2048,dtype=float32",  # exact, just under the limit
]
WARM: dict[str, Any] = {"workload": "matmul", "params": {"m": 64, "n": 64, "k": 64}}
NO_CAP = 2**62


def job_of(text: str, path: str) -> dict[str, Any]:
    """A job from "[workload:]m=…,n=…,dtype=…[,K=…]" (numbers, true/false, or words)."""
    workload, _, pairs = text.rpartition(":")
    params: dict[str, Any] = {}
    measure: dict[str, Any] = {"samples": 2, "warmup": 1}
    for item in pairs.split(","):
        name, _, value = item.partition("=")
        if name == "K":
            measure.update(mode="throughput", calls_per_sample=int(value))
        elif value in ("true", "false"):
            params[name] = value == "true"
        else:
            params[name] = int(value) if value.isdigit() else value
    job = {"workload": workload or "matmul", "path": path, "params": params}
    return {**job, "measure": measure}


async def measure(job: dict[str, Any]) -> tuple[int, str]:
    """The job's peak resident memory over its warm runner's, and the run's reference."""
    pool = RunnerPool()
    try:
        runner = await pool.get(1)
        warm = await runner.run({"job": WARM, "max_bytes": NO_CAP}, 300.0, lambda e: None)
        assert warm.result is not None, warm.error
        assert runner.pid is not None
        reset_peak(runner.pid)
        before = read_status(runner.pid)["rss"]
        outcome = await runner.run({"job": job, "max_bytes": NO_CAP}, 1800.0, lambda e: None)
        if outcome.result is None:
            raise SystemExit(f"{job['params']}: {outcome.error}")
        peak = read_status(runner.pid)["hwm"]
        correctness = outcome.result.get("correctness") or {}
        return peak - before, str(correctness.get("reference"))
    finally:
        await pool.close()


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="*", default=DEFAULT_SET)
    parser.add_argument("--path", default="jax-cpu")
    args = parser.parse_args(argv)
    print(f"{'job':44} {'estimate':>10} {'measured':>10} {'ratio':>6}  phase; reference")
    for text in args.jobs:
        job = job_of(text, args.path)
        spec = JobSpec.model_validate(job)
        params = parse_params(spec.workload, spec.params, NO_CAP)
        alive = spec.measure.calls_per_sample if spec.measure.mode.value == "throughput" else 1
        estimate = params.peak(alive)
        used, reference = await measure(job)
        print(
            f"{text:44} {byte_text(estimate.total):>10} {byte_text(used):>10} "
            f"{estimate.total / max(used, 1):6.2f}  {estimate.phase}; {reference}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
