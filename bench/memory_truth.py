"""Acceptance check of the memory report on real exported programs, yours or
its own, through a real Boundary server, confirmed outside Boundary with plain JAX.

    .venv/bin/python bench/memory_truth.py [FILE.jaxexport ...] [--target v6e:1x1 --target b200:1]
                                           [--dp-target h100:8] [--keep DIR]

Given files, each is uploaded (with FILE.sources.json beside it, as `boundary export-fn`
writes it, when there is one) and compiled for every --target with enough devices. With
no file it exports its own programs with `boundary export-fn` from bench/truth_models.py,
as a user exports theirs: GPT-2 small's forward with nested weights (for each --target),
a data-parallel CNN training step over 8 devices (for --dp-target), and, where a target is
a v6e, two bfloat16 matmuls, one off the (8,128) tiles and one on them.

A real `boundary serve --workers 1` on a free 127.0.0.1 port (bench/first_answer.py's),
one compile-only job per program and target (`"dumps": "none"`: the report comes with the
compile itself), then `GET /api/v1/runs/{id}/memory`. Outside Boundary, the same file is
compiled again for the same target by bench/deviceless.py (jax.export.deserialize, the
target's devices from jax.experimental.topologies, jit(exp.call).lower(...).compile(),
memory_analysis()). Checked per program × target, as the issue states them:

- peak: the report's peak within 1% of memory_analysis()'s, by the design note's rule
  (docs/design/memory-report.md, `workers.protocol.memory.program_peak`): on a TPU
  libtpu's own peak_memory_in_bytes (which counts its VMEM block in place of smaller
  temporaries), on a GPU XLA:GPU's own;
- per device: the report's parameter bytes are memory_analysis()'s argument bytes (one
  device's: an 8-device program's batch is split 8 ways);
- curve: the curve's maximum is the peak, reached at peak_step;
- sum: what the buffers hold at the peak (those listed plus those counted in `other`), the
  blocks counted whole and the unattributed bytes add up to the peak exactly;
- unattributed: under 5% of the peak;
- one instruction: every listed buffer live at the peak names exactly one defining
  instruction;
- source: buffers at the peak name source lines of the user's file (the files the export
  refers to: for its own programs bench/truth_models.py), and none names Boundary's own
  code or JAX's;
- padding (bfloat16 on a v6e): non-zero off the tiles, zero on them.

Prints a PASS/FAIL table with the figures; exit status 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.deviceless import Outcome, compile_file, devices_of, environment  # noqa: E402
from bench.first_answer import export_fn, serve  # noqa: E402
from workers.protocol.memory import program_peak  # noqa: E402

MODELS = ROOT / "bench" / "truth_models.py"
PEAK_TOLERANCE = 0.01
UNATTRIBUTED_LIMIT = 0.05
SETTINGS = {"BOUNDARY_JOB_TIMEOUT_S": "3600", "BOUNDARY_QUEUE_TIMEOUT_S": "7200"}
"""The server's: a v6e compile of GPT-2 can take minutes on a busy machine, and every job
is queued at once behind the others."""
BOUNDARY_CODE = (f"{ROOT}/app/", f"{ROOT}/workers/", "/site-packages/jax/", "/jaxlib/")


@dataclass
class Program:
    """One exported file, the targets it is checked on, and what it is."""

    name: str
    path: Path
    targets: list[str]
    user_files: list[str] = field(default_factory=list)
    """Paths of the user's files its source lines should name (empty: any but ours)."""
    padding: str | None = None
    """For the bfloat16 check: 'off' the tiles (padding > 0), 'on' them (padding 0)."""


def own_programs(folder: Path, targets: list[str], dp_target: str) -> list[Program]:
    """Export this script's own programs into `folder` (module docstring)."""
    made: list[Program] = []
    model = str(MODELS)
    started = time.perf_counter()
    export_fn(
        [f"{model}:gpt2_forward", "--example", f"{model}:gpt2_example", "-o", "gpt2.jaxexport"],
        folder,
    )
    out = ["-o", "cnn_dp8.jaxexport"]
    made.append(Program("gpt2-forward", folder / "gpt2.jaxexport", targets, [model]))
    export_fn(
        [f"{model}:cnn_step", "--example", f"{model}:cnn_example", "--devices", "8", *out],
        folder,
    )
    made.append(Program("cnn-dp8-step", folder / "cnn_dp8.jaxexport", [dp_target], [model]))
    v6e = [t for t in targets if t.startswith("v6e")]
    if v6e:
        for side, n in (("off", 1000), ("on", 1024)):
            shape = f"bfloat16[{n},{n}]"
            out = f"bf16_{n}.jaxexport"
            export_fn([f"{model}:matmul", "--arg", shape, "--arg", shape, "-o", out], folder)
            made.append(Program(f"bf16-matmul-{n}", folder / out, v6e[:1], [model], side))
    print(f"exported {len(made)} programs in {time.perf_counter() - started:.0f} s", flush=True)
    return made


def upload(client: httpx.Client, url: str, program: Program) -> str:
    """Post the file (and its source lines, when beside it); its SHA-256."""

    def post(data: bytes, kind: str) -> str:
        response = client.post(
            f"{url}/api/v1/artifacts",
            params={"kind": kind},
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{program.name}: {kind} refused: {response.text[:500]}")
        digest: str = response.json()["sha256"]
        return digest

    sha = post(program.path.read_bytes(), "exported")
    sources = program.path.with_suffix(".sources.json")
    if sources.exists():
        post(sources.read_bytes(), "sources")
        if not program.user_files:
            files = json.loads(sources.read_text()).get("files", [])
            program.user_files = [f["path"] for f in files]
    return sha


def submit(client: httpx.Client, url: str, sha: str, target: str) -> str:
    """One compile-only job for `target`; its id."""
    job = {
        "workload": "exported",
        "path": "jax-gpu" if target.split(":", 1)[0] in ("h100", "h200", "b200") else "jax-tpu",
        "target": target,
        "stages": ["compile"],
        "params": {"artifact": sha},
        "dumps": "none",
    }
    response = client.post(f"{url}/api/v1/jobs", json=job)
    if response.status_code != 202:
        raise RuntimeError(f"job refused for {target}: {response.text[:500]}")
    job_id: str = response.json()["id"]
    return job_id


def memory_of(client: httpx.Client, url: str, job_id: str, timeout: float) -> dict[str, Any]:
    """Wait for the job, then its memory report (the API's answer)."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"{url}/api/v1/jobs/{job_id}").json()
        if job["status"] == "done":
            break
        if job["status"] in ("failed", "cancelled", "expired"):
            raise RuntimeError(f"job {job_id} {job['status']}: {job.get('reason')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} still {job['status']} after {timeout:.0f} s")
        time.sleep(1)
    response = client.get(f"{url}/api/v1/runs/{job_id}/memory")
    if response.status_code != 200:
        raise RuntimeError(f"no memory report for {job_id}: {response.text[:500]}")
    report: dict[str, Any] = response.json()
    return report


def checks(program: Program, target: str, m: dict[str, Any], out: Outcome) -> list[Check]:
    """Every property of the issue's done-when for one report (module docstring)."""
    peak = int(m["peak_bytes"])
    found = [peak_check(target, m, out), arguments_check(m, out)]
    curve = {step: b for step, b in m["timeline"]}
    top = max(curve.values())
    at = curve.get(m["peak_step"])
    found.append(
        Check(
            "curve",
            top == peak and at == peak,
            f"max {top:,}, at peak_step {m['peak_step']} of {m['steps']}: "
            + (f"{at:,}" if at is not None else "not on the curve"),
        )
    )
    live = [b for b in m["buffers"] if b["live_at_peak"]]
    listed = sum(b["bytes"] if b.get("held_bytes") is None else b["held_bytes"] for b in live)
    others = int(m["other"]["live_at_peak_bytes"])
    blocks = sum(int(k["counted_bytes"]) for k in m.get("blocks") or [])
    unattributed = int(m["unattributed_bytes"])
    total = listed + others + blocks + unattributed
    found.append(
        Check(
            "sum",
            total == peak,
            f"{len(live)} listed {listed:,} + {m['other']['live_at_peak_count']} others "
            f"{others:,} + blocks {blocks:,} + unattributed {unattributed:,} = {total:,}",
        )
    )
    found.append(
        Check(
            "unattributed",
            unattributed < UNATTRIBUTED_LIMIT * peak,
            f"{unattributed:,} = {unattributed / peak:.2%} of the peak",
        )
    )
    several = [b["instructions"] for b in live if len(b["instructions"]) != 1]
    found.append(
        Check(
            "one instruction",
            not several,
            f"{len(live) - len(several)}/{len(live)} name one"
            + (f"; {several[:2]}" if several else ""),
        )
    )
    found.append(source_check(program, m, live))
    if program.padding is not None:
        pad = int(m["padding_bytes"])
        ok = pad > 0 if program.padding == "off" else pad == 0
        found.append(Check("padding", ok, f"{pad:,} B, tiles {program.padding}"))
    return found


def peak_check(target: str, m: dict[str, Any], out: Outcome) -> Check:
    """The report's peak against memory_analysis()'s, by the design note's rule."""
    peak = int(m["peak_bytes"])
    platform = "tpu" if target.startswith("v") else "gpu"
    figure = program_peak(platform, peak=out.peak, temp=out.temp)
    if not figure:
        return Check("peak", False, f"report {peak:,}; memory_analysis() gave no peak")
    off = (peak - figure) / figure
    vmem = next((k for k in m.get("blocks") or [] if k.get("counted_bytes")), None)
    counted = f"; its VMEM block {vmem['counted_bytes']:,} counted whole" if vmem else ""
    return Check(
        "peak",
        abs(off) <= PEAK_TOLERANCE,
        f"report {peak:,} vs memory_analysis() peak_memory_in_bytes {figure:,} ({off:+.3%})"
        + counted,
    )


def arguments_check(m: dict[str, Any], out: Outcome) -> Check:
    """Per device: the report's parameters are memory_analysis()'s argument bytes."""
    params = int(m["allocated"].get("parameter", 0))
    return Check(
        "per device",
        params == out.argument,
        f"parameters {params:,} vs memory_analysis() argument_size_in_bytes {out.argument:,}",
    )


def source_check(program: Program, m: dict[str, Any], live: list[dict[str, Any]]) -> Check:
    """Buffers at the peak made by the program name the user's lines, and no other file."""
    made = [b for b in live if b["kind"] != "parameter"]
    named = [b for b in made if b.get("source")]
    every = [b["source"] for b in m["buffers"] if b.get("source")]
    ours = [s for s in every if any(mark in s for mark in BOUNDARY_CODE)]
    files = {s.rsplit(":", 1)[0] for s in every}
    if program.user_files:
        users = [s for s in every if s.rsplit(":", 1)[0] in program.user_files]
        foreign = [s for s in every if s.rsplit(":", 1)[0] not in program.user_files]
    else:
        users, foreign = [s for s in every if s not in ours], ours
    ok = bool(named) and bool(users) and not ours and not foreign
    short = sorted(Path(f).name for f in files)
    return Check(
        "source",
        ok,
        f"{len(named)}/{len(made)} non-parameter buffers at the peak name a line; files {short}"
        + (f"; not the user's: {sorted(set(foreign))[:3]}" if foreign else ""),
    )


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    figures: str


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE.jaxexport")
    parser.add_argument("--target", action="append", default=[], help="v6e:1x1, b200:1, …")
    parser.add_argument("--dp-target", default="h100:8", help="the own 8-device program's")
    parser.add_argument("--keep", type=Path, help="keep the exports and reports here")
    parser.add_argument("--timeout", type=float, default=1800, help="per job, seconds")
    args = parser.parse_args()
    targets = args.target or ["v6e:1x1", "b200:1"]
    environment()
    with tempfile.TemporaryDirectory(prefix="boundary-truth-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if args.files:
            programs = [Program(f.stem, f, targets) for f in args.files]
        else:
            programs = own_programs(folder, targets, args.dp_target)
        rows = run_all(programs, folder)
    return report(rows)


def run_all(programs: list[Program], folder: Path) -> list[tuple[Program, str, list[Check]]]:
    """Upload, submit every job, then per job: the outside compile, the report, checks."""
    import jax

    rows: list[tuple[Program, str, list[Check]]] = []
    data_dir = folder / "server"
    data_dir.mkdir(exist_ok=True)
    with serve(data_dir, SETTINGS) as url, httpx.Client(timeout=120) as client:
        jobs: list[tuple[Program, str, str]] = []
        for program in programs:
            sha = upload(client, url, program)
            devices = jax.export.deserialize(bytearray(program.path.read_bytes())).nr_devices
            for target in program.targets:
                if devices > len(devices_of(target)):
                    print(f"{program.name}: skipped {target}: fewer than {devices} devices")
                    continue
                jobs.append((program, target, submit(client, url, sha, target)))
        for program, target, job_id in jobs:
            started = time.perf_counter()
            outside = compile_file(program.path.read_bytes(), target)
            took = time.perf_counter() - started
            m = memory_of(client, url, job_id, timeout=1800)
            (folder / f"{program.name}.{target.replace(':', '_')}.memory.json").write_text(
                json.dumps(m, indent=1)
            )
            found = checks(program, target, m, outside)
            rows.append((program, target, found))
            verdict = "PASS" if all(c.ok for c in found) else "FAIL"
            print(f"{program.name} {target}: {verdict} (outside compile {took:.0f} s)", flush=True)
    return rows


def report(rows: list[tuple[Program, str, list[Check]]]) -> int:
    """The table: one line per check, program × target; 1 if anything failed."""
    print("\n| program | target | check | result | figures |\n|---|---|---|---|---|")
    failed = 0
    for program, target, found in rows:
        for check in found:
            failed += not check.ok
            verdict = "PASS" if check.ok else "**FAIL**"
            print(f"| {program.name} | {target} | {check.name} | {verdict} | {check.figures} |")
    print(
        f"\n{len(rows)} program × target, {sum(len(f) for _, _, f in rows)} checks, {failed} failed"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
