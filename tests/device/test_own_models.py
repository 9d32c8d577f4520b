"""Two models nobody wrote for these tests, exported as a user exports theirs, checked and
timed on the chip.

`bench/device/models/` holds a user's own code: a float32 transformer training step
(optax SGD with momentum) and a flax.nnx forward pass with nested parameters. Each is
exported with `boundary export-fn … --symbolic batch=tokens` on this host's CPU (off the
chip), with the example's arrays as the run's inputs and its outputs saved. Run on the
chip at DEFAULT precision, each must pass its check and publish its times. Each one's
twin, whose logits are scaled by 1.05, judged against the unchanged model's outputs, must
fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.device.conftest import Chip, ChipServer, stats

pytestmark = pytest.mark.device

MODELS = {
    "transformer step": ("bench.device.models.transformer_step", "step", 32),
    "nnx forward": ("bench.device.models.nnx_forward", "forward", 16),
}


@dataclass(frozen=True)
class Exported:
    """One model's files as the server stores them: by SHA-256."""

    artifact: str
    changed: str
    inputs: str
    reference: str
    batch: int


def upload(chip_server: ChipServer, path: Path, kind: str) -> str:
    answer = chip_server.post(
        "/api/v1/artifacts",
        params={"kind": kind},
        content=path.read_bytes(),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert answer.status_code == 201, answer.text
    sha: str = answer.json()["sha256"]
    return sha


def export(chip_server: ChipServer, module: str, function: str, folder: Path) -> Path:
    """`boundary export-fn MODULE:FUNCTION` as a user runs it; the artifact's path."""
    out = folder / f"{function}.jaxexport"
    done = chip_server.boundary(
        "export-fn", f"{module}:{function}", "--example", f"{module}:example",
        "--symbolic", "batch=tokens", "--platforms", "cpu,tpu", "-o", str(out),
        "--save-output", str(folder / f"{function}.out.npz"), "--no-source",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def exported(
    chip: Chip, chip_server: ChipServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Exported]:
    found = {}
    for label, (module, function, batch) in MODELS.items():
        folder = tmp_path_factory.mktemp(function)
        artifact = export(chip_server, module, function, folder)
        changed = export(chip_server, module, f"{function}_changed", folder)
        found[label] = Exported(
            artifact=upload(chip_server, artifact, "exported"),
            changed=upload(chip_server, changed, "exported"),
            inputs=upload(chip_server, artifact.with_suffix(".inputs.npz"), "npz"),
            reference=upload(chip_server, folder / f"{function}.out.npz", "npz"),
            batch=batch,
        )
    return found


def job(chip: Chip, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "workload": "exported",
        "path": chip.path,
        "params": params,
        "measure": {"samples": 20},
    }


@pytest.mark.parametrize("label", list(MODELS))
def test_a_users_model_passes_on_the_chip_and_publishes_its_times(
    *,
    chip: Chip,
    chip_server: ChipServer,
    exported: dict[str, Exported],
    record: Callable[..., None],
    keep: Callable[[dict[str, Any]], None],
    label: str,
) -> None:
    e = exported[label]
    params = {"artifact": e.artifact, "inputs": e.inputs, "dims": {"batch": e.batch}}
    if not chip.on_tpu:  # on the chip, the same artifact on the CPU stands in for a reference
        params["reference"] = e.reference
    done = chip_server.run(job(chip, params))
    keep(done)
    run = done["run"]
    assert done["status"] == "done" and run is not None, done.get("reason")
    c = run["correctness"]
    times = stats(run)
    record(
        "own model",
        model=label,
        job=done["id"],
        valid=run["valid"],
        error=c["error"],
        tolerance=c["tolerance"],
        worst=c["worst"],
        arithmetic=c["arithmetic_words"],
        reference=c["reference"],
        medians_us={k: v * 1e6 for k, v in times.items()},
        prediction=run.get("prediction"),
    )
    assert run["valid"] and c["passed"], c["detail"]
    assert c["arithmetic"] == ("bf16x1" if chip.on_tpu else "float32")
    assert "host-sync" in times
    if chip.on_tpu:
        assert 0 < times["device-time"] <= times["host-sync"]
        assert run["prediction"]["same_hlo"] is True


@pytest.mark.parametrize("label", list(MODELS))
def test_a_wrong_answer_still_fails_on_the_chip(
    *,
    chip: Chip,
    chip_server: ChipServer,
    exported: dict[str, Exported],
    record: Callable[..., None],
    label: str,
) -> None:
    e = exported[label]
    params = {
        "artifact": e.changed,
        "inputs": e.inputs,
        "reference": e.reference,
        "dims": {"batch": e.batch},
    }
    done = chip_server.run(job(chip, params))
    run = done["run"]
    assert run is not None, done.get("reason")
    c = run["correctness"]
    record(
        "changed model",
        model=label,
        job=done["id"],
        valid=run["valid"],
        error=c["error"],
        tolerance=c["tolerance"],
        worst=c["worst"],
    )
    assert not c["passed"] and not run["valid"]
    assert c["error"] > c["tolerance"]
    assert "host-sync" not in stats(run)  # a wrong answer shows no time
