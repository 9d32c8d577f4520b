"""Event-vs-host timing on one NVIDIA GPU, side by side in one run.

For a ladder of sizes, the cuda path times our kernel (and cuBLAS, for matmul) under
`device-events` (a CUDA event pair in the stream) and `host-sync` (host clock from the
launch to the end of a stream synchronize). This prints both medians, their difference
(launch and synchronization overhead seen from the host) and their ratio, so a reader sees
where the host boundary stops telling anything about the device: small kernels.

    python bench/cuda_events.py [--samples 30] [--markdown FILE] [--json FILE] [--quick]

Without a GPU it measures nothing, says why, and exits with status 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.compiler.jaxenv import apply_jax_environment

apply_jax_environment()  # a GPU is found by its device files; JAX then uses it

from workers.cuda.env import probe_gpu  # noqa: E402
from workers.protocol import BoundaryId, JobSpec  # noqa: E402

NO_GPU = 3

LADDER: list[tuple[str, dict[str, Any]]] = [
    ("elementwise", {"n": 1 << 10, "ops": 8}),
    ("elementwise", {"n": 1 << 14, "ops": 8}),
    ("elementwise", {"n": 1 << 18, "ops": 8}),
    ("elementwise", {"n": 1 << 22, "ops": 8}),
    ("elementwise", {"n": 1 << 26, "ops": 8}),
    ("matmul", {"m": 128, "n": 128, "k": 128}),
    ("matmul", {"m": 512, "n": 512, "k": 512}),
    ("matmul", {"m": 2048, "n": 2048, "k": 2048}),
    ("matmul", {"m": 4096, "n": 4096, "k": 4096}),
]
QUICK = [LADDER[0], LADDER[3], LADDER[5], LADDER[7]]


def _size(workload: str, params: dict[str, Any]) -> str:
    if workload == "matmul":
        return f"{params['m']}×{params['n']}×{params['k']}"
    return f"n=2^{params['n'].bit_length() - 1}, {params['ops']} ops"


def measure(samples: int, ladder: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (case, subject): both medians, their gap and ratio."""
    from workers.run.engine import run_job

    rows: list[dict[str, Any]] = []
    for workload, params in ladder:
        job = JobSpec.model_validate(
            {
                "workload": workload,
                "path": "cuda",
                "params": params,
                "measure": {"samples": samples, "cache": "persistent", "max_seconds": 20},
            }
        )
        run = run_job(job)
        medians: dict[str, dict[BoundaryId, float]] = {}
        for m in run.measurements:
            if m.stats is not None and m.subject:
                medians.setdefault(m.subject, {})[m.boundary] = m.stats.median
        for subject, found in medians.items():
            device = found.get(BoundaryId.DEVICE_EVENTS)
            host = found.get(BoundaryId.HOST_SYNC)
            rows.append(
                {
                    "workload": workload,
                    "size": _size(workload, params),
                    "subject": subject,
                    "device_events_s": device,
                    "host_sync_s": host,
                    "gap_s": host - device if host is not None and device is not None else None,
                    "ratio": host / device if host and device else None,
                    "valid": run.valid,
                    "device": run.environment.device_kind,
                    "samples": samples,
                }
            )
    return rows


def _us(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e6:,.1f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table, labelled with the device they ran on."""
    device = rows[0]["device"] if rows else "no device"
    lines = [
        f"Event-vs-host timing on {device}, medians of {rows[0]['samples'] if rows else 0} "
        "samples per boundary (µs). JAX has no device-events interval (its own streams).",
        "",
        "| workload | size | subject | device-events | host-sync | host − device | host ÷ device |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(
            f"| {r['workload']} | {r['size']} | {r['subject']} | {_us(r['device_events_s'])} | "
            f"{_us(r['host_sync_s'])} | {_us(r['gap_s'])} | {ratio} |"
            + ("" if r["valid"] else " (failed its check)")
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="four sizes instead of nine")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    probe = probe_gpu()
    if probe.count == 0:
        print(f"cuda_events: nothing measured: no NVIDIA GPU ({probe.reason})", file=sys.stderr)
        return NO_GPU
    rows = measure(args.samples, QUICK if args.quick else LADDER)
    table = markdown(rows)
    print(table)
    if args.markdown:
        args.markdown.write_text(table, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0 if all(r["valid"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
