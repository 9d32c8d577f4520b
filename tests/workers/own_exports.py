"""The tests' own model exported as a user exports theirs: `boundary export-fn
MODEL:FUNCTION --example MODEL:EXAMPLE`, a real command in its own process (the 8-device
program with `--devices 8`), with input rules (`--generated-inputs`: the example's arrays
give shapes only) and a sampled reference."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(__file__).resolve().parent / "own_model.py"
SAMPLE = 64
"""Sampled elements per result in the reference export-fn writes."""


@dataclass(frozen=True)
class Program:
    """One of the three programs: what is exported, from which example, on how many devices."""

    function: str
    example: str
    devices: int
    rules: str
    """The own_model constant holding its input rules."""


PROGRAMS = {
    "forward": Program("forward", "forward_example", 1, "FORWARD_RULES"),
    "train": Program("train_step", "train_example", 1, "TRAIN_RULES"),
    "dp": Program("train_step", "dp_example", 8, "TRAIN_RULES"),
}

TARGETS = ("v6e:1x1", "v6e:2x4", "b200:1", "h100:8")
"""The targets each program is compiled for where its device count fits."""


@dataclass(frozen=True)
class Exported:
    """An exported program: its files and what export-fn said about it."""

    name: str
    artifact: Path
    sample: Path
    rules: dict[str, Any]
    summary: dict[str, Any]

    @property
    def devices(self) -> int:
        return int(self.summary["nr_devices"])

    def fits(self, target: str) -> bool:
        count = 1 if target.endswith(":1x1") or target.endswith(":1") else 8
        return self.devices <= count


def rules_of(program: Program) -> dict[str, Any]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("own_model", MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rules: dict[str, Any] = getattr(module, program.rules)
    return rules


def export_fn(
    args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`boundary export-fn ARGS` in its own process, as a user runs it."""
    command = [sys.executable, "-m", "app.cli", "export-fn", *args]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout, check=False
    )


def export_program(name: str, folder: Path, *extra: str) -> Exported:
    """Export one of PROGRAMS into `folder` with its input rules and a sampled reference."""
    program = PROGRAMS[name]
    rules = rules_of(program)
    artifact = folder / f"{name}.jaxexport"
    sample = folder / f"{name}.sample.npz"
    args = [f"{MODEL}:{program.function}", "--example", f"{MODEL}:{program.example}"]
    # Drawn under the rules, not the example's own values: the tests' jobs name the rules.
    args += ["-o", str(artifact), "--input-rules", json.dumps(rules), "--generated-inputs"]
    args += ["--save-output-sample", str(SAMPLE), "--sample-file", str(sample)]
    if program.devices > 1:
        args += ["--devices", str(program.devices)]
    done = export_fn([*args, *extra], folder)
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout)
    return Exported(name, artifact, sample, rules, summary)


def exported_once(folder: Path) -> dict[str, Exported]:
    """PROGRAMS exported into `folder` by the first process that asks; the others
    (pytest-xdist's worker processes) wait for it on a lock and read the same files."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "exporting.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        made: dict[str, Exported] = {}
        for name, program in PROGRAMS.items():
            said = folder / f"{name}.summary.json"
            if said.exists():
                artifact, sample = folder / f"{name}.jaxexport", folder / f"{name}.sample.npz"
                summary = json.loads(said.read_text())
                made[name] = Exported(name, artifact, sample, rules_of(program), summary)
            else:
                made[name] = export_program(name, folder)
                said.write_text(json.dumps(made[name].summary))
        return made


def plain_peak(artifact: Path, target_id: str) -> int:
    """What a user would write: `jax.jit(exp.call).lower(*args, **kwargs).compile()` on
    the target's devices, and the compiler's own peak per device: the yardstick a
    worker's deviceless compile of the same artifact is held to."""
    import jax

    from workers.export.meshes import argument_shardings
    from workers.protocol import parse_target
    from workers.xla_targets.topology import target_devices

    exp = jax.export.deserialize(bytearray(artifact.read_bytes()))
    devices = target_devices(parse_target(target_id))
    structs = [
        jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
        for a, s in zip(exp.in_avals, argument_shardings(exp, devices), strict=True)
    ]
    args, kwargs = jax.tree.unflatten(exp.in_tree, structs)
    compiled = jax.jit(exp.call).lower(*args, **kwargs).compile()
    return int(compiled.memory_analysis().peak_memory_in_bytes)


def assert_peak_as_plain_jax(exported: Exported, target_id: str, peak: int) -> None:
    """A worker's peak for `exported` on `target_id` within 10 % of plain JAX's."""
    plain = plain_peak(exported.artifact, target_id)
    assert abs(peak - plain) <= 0.1 * plain, (exported.name, target_id, peak, plain)
