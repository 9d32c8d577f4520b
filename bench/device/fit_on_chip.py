"""A fit search for the chip's own target, confirmed on the chip.

For each exported program with a symbolic dimension (the models in `bench/device/models`
by default, exported here with `boundary export-fn`, `--only` picking some, or `.jaxexport`
files a reviewer names), a fit search runs for `v5e:1x1` without the device, through
`boundary serve --uds` and a `boundary worker` on the chip's host (its chipless runner
compiles the probes). Its answer L is then held against the chip itself: a run at L must
compile and execute on the TPU v5e, and the compile at L + step (the next value of the
search's grid) must be refused by libtpu on the device, for its HBM.

Run on the chip's host: `python3 bench/device/fit_on_chip.py [FILE.jaxexport --dim b] [--range
1:65536] [--step 64] [--only "nnx train step"]`. `--cpu` checks the script on the CPU: the
search for v6e:1x1, and the run's job at the grid's first value on jax-cpu; nothing is
confirmed there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.device.socket_overhead import TOKEN, start  # noqa: E402
from workers.export.server_address import ServerAddress  # noqa: E402

OWN = {
    "transformer step": ("bench.device.models.transformer_step", "step"),
    "nnx forward": ("bench.device.models.nnx_forward", "forward"),
    "nnx train step": ("bench.device.models.nnx_step", "step"),
}
RULES: dict[str, dict[str, Any]] = {
    "nnx train step": {"opt_state/*": {"kind": "zeros"}, "opt_state/0/nu/*": {"kind": "positive"}},
}
"""How a run draws the arguments of an own model that needs more than the defaults (read
here, not from the model's module: importing it would open the chip in this process, and
one process at a time may hold a TPU). AdamW's second moment drawn as N(0, 1) is negative
half the time, and its square root NaN."""


def export_own(folder: Path, only: list[str] | None = None) -> list[tuple[str, Path]]:
    """The models (those `only` names, else all), exported with a symbolic batch as a user
    would, off the chip."""
    found = []
    for label, (module, function) in OWN.items():
        if only and label not in only:
            continue
        out = folder / f"{module.rsplit('.', 1)[-1]}.jaxexport"
        subprocess.run(
            [sys.executable, "-m", "app.cli", "export-fn", f"{module}:{function}",
             "--example", f"{module}:example", "--symbolic", "batch=tokens",
             "--platforms", "cpu,tpu", "-o", str(out), "--no-source"],
            cwd=ROOT, check=True, capture_output=True,
            env={**os.environ, "BOUNDARY_JAX_PLATFORMS": "cpu"},
        )  # fmt: skip
        found.append((label, out))
    return found


def wait(client: Any, address: str, final: tuple[str, ...], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer: dict[str, Any] = client.get(address).json()
        if answer["status"] in final:
            return answer
        time.sleep(1.0)
    raise SystemExit(f"{address} did not end in {timeout:.0f} s")


def confirm(
    client: Any,
    sha: str,
    dim: str,
    *,
    span: tuple[int, int],
    step: int,
    target: str,
    path: str,
    rules: dict[str, Any] | None = None,
) -> dict[str, Any]:
    fit = client.post(
        "/api/v1/fits",
        json={"artifact": sha, "dimension": dim, "range": list(span), "step": step,
              "targets": [target]},
    )  # fmt: skip
    assert fit.status_code == 202, fit.text
    found = wait(client, f"/api/v1/fits/{fit.json()['id']}", ("done", "failed", "cancelled"), 3600)
    t = found["targets"][0]
    row: dict[str, Any] = {
        "target": target,
        "largest_fitting": t.get("largest_fitting"),
        "usable_bytes": t.get("usable_bytes"),
        "peak_at_largest": t.get("peak_bytes_at_largest"),
        "above": t.get("value_above"),
        "compiles": len(t.get("probes") or []),
        "non_monotone": t.get("non_monotone"),
    }
    largest = t.get("largest_fitting")
    if largest is None:
        return row
    # On the CPU (a check of the script) the answer is far too large to run: the jobs the
    # chip would get run at the grid's first value instead, so their bodies are tried.
    tried = ((step, "at_largest"),) if path == "jax-cpu" else (
        (largest, "at_largest"), (t.get("value_above"), "above_on_chip"))  # fmt: skip
    for value, key in tried:
        if value is None:
            continue
        params = {
            "artifact": sha,
            "dims": {dim: value},
            **({"input_rules": rules} if rules else {}),
        }
        body = {"workload": "exported", "path": path, "measure": {"samples": 5}, "params": params}
        posted = client.post("/api/v1/jobs", json=body)
        if posted.status_code != 202:  # the server's own refusal (its job limit, say)
            row[key] = {"value": value, "status": "refused", "reason": posted.text[:300]}
            continue
        job_id = posted.json()["id"]
        job = wait(client, f"/api/v1/jobs/{job_id}", ("done", "failed", "expired"), 1800)
        run = job.get("run") or {}
        row[key] = {"value": value, "status": job["status"], "valid": run.get("valid"),
                    "check": (run.get("correctness") or {}).get("detail"),
                    "reason": (job.get("reason") or "")[:300]}  # fmt: skip
    ran = row.get("at_largest", {})
    if path == "jax-cpu":
        return row  # nothing confirmed without the chip
    above = row.get("above_on_chip")  # none when L is the range's top
    refused = above is None or (
        above["status"] == "failed" and "RESOURCE_EXHAUSTED" in above["reason"]
    )
    row["confirmed"] = ran.get("status") == "done" and ran.get("valid") is True and refused
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--dim", default="batch")
    parser.add_argument("--range", default="1:65536")
    parser.add_argument("--step", type=int, default=64)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted(OWN), help="an own model")
    args = parser.parse_args()
    lo, hi = (int(x) for x in args.range.split(":"))
    lo = lo if (hi - lo) % args.step == 0 else hi - args.step * ((hi - lo) // args.step)
    target, path = ("v6e:1x1", "jax-cpu") if args.cpu else ("v5e:1x1", "jax-tpu")
    env = {"BOUNDARY_JAX_PLATFORMS": "cpu"} if args.cpu else {}
    with tempfile.TemporaryDirectory(prefix="bfit-") as name:
        tmp = Path(name)
        programs = [(f.name, f) for f in args.files] or export_own(tmp, args.only)
        procs = start(tmp, tmp / "b.sock", {**env, "BOUNDARY_WORKER_TOKEN": TOKEN})
        server = ServerAddress.parse(f"unix:{tmp / 'b.sock'}")
        rows = []
        try:
            with server.client(timeout=600) as client:
                wait_for = time.monotonic() + 300
                while not client.get("/api/v1/workers").json()["data"]:
                    assert time.monotonic() < wait_for, "no worker registered"
                    time.sleep(0.5)
                for label, file in programs:
                    sha = client.post(
                        "/api/v1/artifacts", params={"kind": "exported"},
                        content=file.read_bytes(),
                        headers={"Content-Type": "application/octet-stream"},
                    ).json()["sha256"]  # fmt: skip
                    row = confirm(
                        client,
                        sha,
                        args.dim,
                        span=(lo, hi),
                        step=args.step,
                        target=target,
                        path=path,
                        rules=RULES.get(label),
                    )
                    row["program"] = label
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(timeout=60)
    confirmed = sum(1 for r in rows if r.get("confirmed"))
    if args.cpu:
        print(f"{len(rows)} searches and their runs' jobs tried on the CPU; nothing is confirmed")
    else:
        print(f"{confirmed} of {len(rows)} answers confirmed on the chip")
    return 0 if args.cpu or confirmed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
