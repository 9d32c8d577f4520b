"""Boundary's device time on a real chip against a plain profiler trace, in one process.

For each program (a 4096³ and an 8192³ bfloat16 matmul, a chain of elementwise operations
over 16M float32 values, 16 row sums over 1M float32 values), the job runs through the engine on
the chip, which reports the program's span on the device per call (boundary
`device-time`) beside host-sync. Then the same jitted function runs 10 times under a
plain `jax.profiler` trace and its module events are read straight from the trace (no
Boundary code). The two medians must agree within 3 % or 0.5 µs, whichever is larger.

It also prints what host-sync hides (1 − device / host-sync) and the compiler's estimate
beside the measurement: the sum of `estimated_cycles` over the entry computation's
instructions, at the clock `--clock-hz` (1.5 GHz by default for a TPU v5e).

Run on the chip's host: `python3 bench/device/device_time_vs_trace.py`; `--cpu` checks the
script on the CPU (no device time there).
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.compiler.jaxenv import apply_jax_environment

apply_jax_environment()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.profiler import ProfileData  # noqa: E402

from workers.catalog import parse_params  # noqa: E402
from workers.protocol import BoundaryId, JobSpec, MeasureOptions  # noqa: E402
from workers.run.engine import run_job  # noqa: E402
from workers.workloads import get_workload  # noqa: E402
from workers.workloads.base import function_for  # noqa: E402

PROGRAMS: dict[str, tuple[str, dict[str, Any]]] = {
    "matmul 4096³ bf16": ("matmul", {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16"}),
    "matmul 8192³ bf16": ("matmul", {"m": 8192, "n": 8192, "k": 8192, "dtype": "bfloat16"}),
    "elementwise 16M f32": ("elementwise", {"n": 1 << 24, "ops": 8}),
    "sum 1M f32": ("reduction", {"rows": 16, "cols": 1 << 16}),
}
SMALL: dict[str, dict[str, Any]] = {
    "matmul 4096³ bf16": {"m": 256, "n": 256, "k": 256},
    "matmul 8192³ bf16": {"m": 512, "n": 512, "k": 512},
    "elementwise 16M f32": {"n": 1 << 16},
}
_CYCLES = re.compile(r'"estimated_cycles":"?(\d+)')


def plain_trace(workload: str, params: dict[str, Any], calls: int = 10) -> list[float] | None:
    """Device seconds per call of the workload's jitted function under a plain trace."""
    typed = parse_params(workload, params)
    w = get_workload(workload)
    inputs = w.make_inputs(typed, np.random.default_rng(0))
    args = [jax.device_put(x) for x in inputs]
    f = jax.jit(function_for(w, typed, None))
    jax.block_until_ready(f(*args))
    name = f.lower(*args).compile().as_text().split(None, 2)[1].rstrip(",")
    folder = tempfile.mkdtemp()
    jax.profiler.start_trace(folder)
    for _ in range(calls):
        jax.block_until_ready(f(*args))
    jax.profiler.stop_trace()
    found = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
    if not found:
        return None
    spans = []
    for plane in ProfileData.from_file(found[0]).planes:
        if not plane.name.startswith("/device:") or "CUSTOM" in plane.name:
            continue
        for line in plane.lines:
            if line.name == "XLA Modules":
                spans += [e.duration_ns * 1e-9 for e in line.events if e.name.startswith(name)]
    return spans or None


def estimated_s(hlo: str | None, clock_hz: float) -> float | None:
    """The compiler's estimate: `estimated_cycles` over the entry computation, in seconds."""
    if not hlo or "ENTRY" not in hlo:
        return None
    entry = hlo.split("ENTRY", 1)[1].split("\n}\n", 1)[0]
    cycles = [int(m) for m in _CYCLES.findall(entry)]
    return sum(cycles) / clock_hz if cycles else None


def one(label: str, path: str, cpu: bool, clock_hz: float) -> dict[str, Any]:
    workload, params = PROGRAMS[label]
    params = {**params, **(SMALL.get(label, {}) if cpu else {})}
    run = run_job(
        JobSpec(workload=workload, path=path, params=params, measure=MeasureOptions(samples=20))
    )
    by = {m.boundary: m for m in run.measurements if m.stats is not None}
    host = by.get(BoundaryId.HOST_SYNC)
    device = by.get(BoundaryId.DEVICE_TIME)
    plain = plain_trace(workload, params)
    row: dict[str, Any] = {"program": label, "valid": run.valid}
    row["host_sync_us"] = host.stats.median * 1e6 if host and host.stats else None
    row["device_us"] = device.stats.median * 1e6 if device and device.stats else None
    row["plain_trace_us"] = statistics.median(plain) * 1e6 if plain else None
    if row["device_us"] and row["plain_trace_us"]:
        gap = abs(row["device_us"] - row["plain_trace_us"])
        row["agrees"] = gap <= max(0.03 * row["plain_trace_us"], 0.5)
        row["hidden_by_host_sync"] = 1 - row["device_us"] / row["host_sync_us"]
    estimate = estimated_s(run.artifacts.hlo, clock_hz)
    row["estimated_us"] = estimate * 1e6 if estimate else None
    if estimate and row["device_us"]:
        row["estimated_over_measured"] = estimate * 1e6 / row["device_us"]
    row["bundles"] = run.artifacts.bundles is not None
    row["memory_report"] = run.memory_report is not None
    p = run.prediction
    row["prediction"] = p.model_dump(exclude_none=True) if p else None
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="check the script on the CPU")
    parser.add_argument("--clock-hz", type=float, default=1.5e9)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    path = "jax-cpu" if args.cpu else "jax-tpu"
    rows = []
    for label in PROGRAMS:
        row = one(label, path, args.cpu, args.clock_hz)
        rows.append(row)
        print(json.dumps(row), flush=True)
    agreed = sum(1 for r in rows if r.get("agrees"))
    print(f"{agreed} of {len(rows)} programs: device time within 3 % (or 0.5 µs) of the trace")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if args.cpu or agreed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
