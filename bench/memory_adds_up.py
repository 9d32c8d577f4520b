"""Does the memory report add up for models written outside Boundary? Three figures per
model and target, through a real server, against plain JAX.

    .venv/bin/python bench/memory_adds_up.py [--keep DIR] [--only NAME ...]

The models are bench/memory_models/, each exported as a user exports theirs
(`boundary export-fn FILE:FUNCTION --example FILE:EXAMPLE`):

- transformer_nnx: a flax nnx transformer's forward, its parameters nested nnx modules;
- cnn_optax: an optax (Adam) training step of a CNN, data-parallel over 8 devices
  (`--devices 8`);
- mlp: a plain-JAX MLP's training step, exported once with a symbolic batch and compiled
  at b=1, 8 and 1024.

Each is compiled for v6e:1x1, h100:1 and b200:1 (the CNN for h100:8) by one compile-only
job on a `boundary serve --workers 1` (bench/first_answer.py's), its report read from
`GET /api/v1/runs/{id}/memory`. Outside Boundary the same file is compiled again for the
same target with plain JAX (bench/deviceless.py) for `memory_analysis()`. Per row:

- peak: the report's peak against memory_analysis()'s figure as docs/design/memory-report.md
  defines it (`workers.protocol.memory.program_peak`: peak_memory_in_bytes on TPUs and
  GPUs); within 1% passes;
- unattributed: the bytes of the peak no buffer holds and no block counted whole covers,
  as a share of the peak; under 5% passes;
- user lines: of the buffers live at the peak that name a source line, the share that
  name the model's own file; at least half passes.

Prints the table; exit status 1 when a row fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.deviceless import compile_file, environment  # noqa: E402
from bench.first_answer import export_fn, serve  # noqa: E402
from bench.memory_truth import SETTINGS, memory_of  # noqa: E402
from workers.protocol.memory import program_peak  # noqa: E402

MODELS = ROOT / "bench" / "memory_models"
ONE_DEVICE = ("v6e:1x1", "h100:1", "b200:1")
PEAK_TOLERANCE = 0.01
UNATTRIBUTED_LIMIT = 0.05
USER_SHARE = 0.5


@dataclass(frozen=True)
class Model:
    """One exported model: how export-fn is called, and where it is compiled."""

    name: str
    file: str
    function: str
    targets: tuple[str, ...]
    extra: tuple[str, ...] = ()
    batches: tuple[int, ...] = ()
    """Values of the symbolic batch `b`, one compile each; none without one."""


CATALOG = (
    Model("transformer_nnx", "transformer_nnx.py", "forward", ONE_DEVICE),
    Model("cnn_optax", "cnn_optax.py", "train_step", ("h100:8",), ("--devices", "8")),
    Model("mlp", "mlp.py", "train_step", ONE_DEVICE, ("--symbolic", "b=x,y"), (1, 8, 1024)),
)


@dataclass(frozen=True)
class Row:
    model: Model
    target: str
    dims: dict[str, int]
    report: dict[str, Any]
    figure: int | None
    """memory_analysis()'s figure, by the docs' rule, from the outside compile."""

    @property
    def label(self) -> str:
        return self.model.name + "".join(f" {k}={v}" for k, v in self.dims.items())

    def peak_off(self) -> float | None:
        if not self.figure:
            return None
        return (int(self.report["peak_bytes"]) - self.figure) / self.figure

    def unattributed(self) -> float:
        return int(self.report["unattributed_bytes"]) / max(int(self.report["peak_bytes"]), 1)

    def user_lines(self) -> tuple[int, int]:
        """(buffers at the peak naming the model's file, buffers at the peak naming a line)."""
        named = [b for b in self.report["buffers"] if b["live_at_peak"] and b.get("source")]
        mine = [b for b in named if b["source"].rsplit(":", 1)[0] == str(MODELS / self.model.file)]
        return len(mine), len(named)

    def verdicts(self) -> tuple[bool, bool, bool]:
        off = self.peak_off()
        mine, named = self.user_lines()
        return (
            off is not None and abs(off) <= PEAK_TOLERANCE,
            self.unattributed() < UNATTRIBUTED_LIMIT,
            named > 0 and mine >= USER_SHARE * named,
        )


def exported(folder: Path, model: Model) -> Path:
    """`boundary export-fn` of `model` into `folder`; the artifact."""
    path = MODELS / model.file
    out = folder / f"{model.name}.jaxexport"
    args = [f"{path}:{model.function}", "--example", f"{path}:example", "-o", str(out)]
    export_fn([*args, *model.extra], folder)
    return out


def upload(client: httpx.Client, url: str, artifact: Path) -> str:
    """Post the artifact and its source lines; its SHA-256."""
    sha = ""
    for path, kind in ((artifact, "exported"), (artifact.with_suffix(".sources.json"), "sources")):
        response = client.post(
            f"{url}/api/v1/artifacts",
            params={"kind": kind},
            content=path.read_bytes(),
            headers={"Content-Type": "application/octet-stream"},
        )
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{path.name} refused: {response.text[:500]}")
        sha = sha or str(response.json()["sha256"])
    return sha


def submit(client: httpx.Client, url: str, sha: str, target: str, dims: dict[str, int]) -> str:
    """One compile-only job of the artifact for `target` at `dims`; its id."""
    gpu = target.split(":", 1)[0] in ("h100", "h200", "b200")
    params: dict[str, Any] = {"artifact": sha, **({"dims": dims} if dims else {})}
    job = {
        "workload": "exported",
        "path": "jax-gpu" if gpu else "jax-tpu",
        "target": target,
        "stages": ["compile"],
        "params": params,
        "dumps": "none",
    }
    response = client.post(f"{url}/api/v1/jobs", json=job)
    if response.status_code != 202:
        raise RuntimeError(f"job refused for {target}: {response.text[:500]}")
    return str(response.json()["id"])


def outside_figure(artifact: Path, target: str, dims: dict[str, int]) -> int | None:
    """memory_analysis()'s figure for the same file and target, compiled with plain JAX."""
    out = compile_file(artifact.read_bytes(), target, dims)
    platform = "tpu" if target.startswith("v") else "gpu"
    return program_peak(platform, peak=out.peak, temp=out.temp)


def run_all(models: list[Model], folder: Path) -> list[Row]:
    """Export, upload and queue every compile, then read each report and compile outside."""
    artifacts = {m.name: exported(folder, m) for m in models}
    data = folder / "server"
    data.mkdir(exist_ok=True)
    rows: list[Row] = []
    with serve(data, SETTINGS) as url, httpx.Client(timeout=120) as client:
        jobs: list[tuple[Model, str, dict[str, int], str]] = []
        for m in models:
            sha = upload(client, url, artifacts[m.name])
            for target in m.targets:
                for dims in [{"b": b} for b in m.batches] or [{}]:
                    jobs.append((m, target, dims, submit(client, url, sha, target, dims)))
        for m, target, dims, job in jobs:
            started = time.perf_counter()
            report = memory_of(client, url, job, timeout=1800)
            figure = outside_figure(artifacts[m.name], target, dims)
            row = Row(m, target, dims, report, figure)
            name = f"{row.label.replace(' ', '_')}.{target.replace(':', '_')}.memory.json"
            (folder / name).write_text(json.dumps(report, indent=1))
            rows.append(row)
            print(f"{row.label} {target}: {time.perf_counter() - started:.0f} s", flush=True)
    return rows


def table(rows: list[Row]) -> int:
    """The three figures per model and target; the number of rows that fail."""
    print(
        "\n| model | target | peak | memory_analysis() | off | unattributed | "
        "user lines at the peak | verdict |\n|---|---|---|---|---|---|---|---|"
    )
    failed = 0
    for row in rows:
        off = row.peak_off()
        mine, named = row.user_lines()
        ok = all(row.verdicts())
        failed += not ok
        figure = f"{row.figure:,}" if row.figure is not None else "not reported"
        print(
            f"| {row.label} | {row.target} | {int(row.report['peak_bytes']):,} | {figure} | "
            + (f"{off:+.3%}" if off is not None else "—")
            + f" | {row.unattributed():.2%} | {mine}/{named} | "
            + ("PASS" if ok else "**FAIL** " + str(row.verdicts()))
            + " |"
        )
    print(f"\n{len(rows)} model × target, {failed} failed")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--keep", type=Path, help="keep the exports and reports here")
    parser.add_argument("--only", action="append", default=[], help="a model's name")
    args = parser.parse_args()
    environment()
    models = [m for m in CATALOG if not args.only or m.name in args.only]
    with tempfile.TemporaryDirectory(prefix="boundary-adds-up-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        failed = table(run_all(models, folder))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
