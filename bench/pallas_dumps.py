"""The Pallas rows of `bench/targets.py --pallas`: what a deviceless run adds below the
optimized HLO, untimed, against its timed compile.

Per case (a Pallas kernel, or XLA's own for comparison, on v6e, H100 and B200 targets):
`--rounds` whole deviceless runs (`run_job`), each in a fresh process after one untimed
compile of a small other program for the platform. Prints the timed compile's median, the
median of what the run adds below the HLO without timing it (TPU: libtpu's bundle dump, a
compile of the exported program in a child process; GPU: XLA's dump compile for the PTX,
Mosaic GPU's own dump in a child, ptxas and cuobjdump for the SASS), and
(compile + dump) ÷ compile.

    .venv/bin/python bench/targets.py --pallas [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
                [sys.executable, __file__, "--row", str(index)],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--row", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row is not None:
        pallas_row(args.row)
        return
    pallas_rows(args.rounds)


if __name__ == "__main__":
    main()
