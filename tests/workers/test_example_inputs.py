"""An example's arrays are the runs' inputs: `boundary export-fn --example` (in this
process) writes them beside the artifact, computes its sample on them, and a worker's run
on that file (the arguments it leaves out drawn from the seed and rules, as export-fn drew
them) passes its check where a run on drawn values fails it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workers.catalog import CatalogError
from workers.cli.export_fn import EXIT_OK, EXIT_USAGE, export_command
from workers.files import FileCache
from workers.protocol import JobSpec
from workers.run.engine import run_job

MODEL = """
import jax
import jax.numpy as jnp
import numpy as np

def forward(params, tokens):
    x = params["embed"][tokens]
    h = jax.nn.gelu(x @ params["w"])
    return jax.nn.softmax(h @ params["embed"].T, axis=-1)

def _params():
    rng = np.random.default_rng(5)
    return {
        "embed": jnp.asarray(rng.standard_normal((32, 8), dtype=np.float32) * 0.5),
        "w": jnp.asarray(rng.standard_normal((8, 8), dtype=np.float32) * 0.3),
    }

def _tokens():
    return jnp.asarray(np.arange(24, dtype=np.int32).reshape(4, 6) % 32)

def given():
    return _params(), _tokens()

def mixed():
    shapes = {name: jax.ShapeDtypeStruct(a.shape, a.dtype) for name, a in _params().items()}
    return shapes, _tokens()

def large():
    embed = np.random.default_rng(6).standard_normal((4096, 8), dtype=np.float32)
    return {"embed": jnp.asarray(embed), "w": _params()["w"]}, _tokens()
"""

RULES = {"params/*": {"kind": "normal", "scale": 0.3}}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "example_inputs_model.py"
    path.write_text(MODEL)
    return path


def export(
    capsys: pytest.CaptureFixture[str], model: Path, example: str, *extra: str
) -> tuple[int, dict[str, Any], str]:
    """`boundary export-fn` in this process: (exit status, its summary, its stderr)."""
    out = model.parent / f"{example}.jaxexport"
    argv = [f"{model}:forward", "--example", f"{model}:{example}", "-o", str(out), *extra]
    status = export_command([*argv, "--platforms", "cpu", "--save-output-sample", "40"])
    said = capsys.readouterr()
    return status, (json.loads(said.out) if status == EXIT_OK else {}), said.err


def checked_run(files: FileCache, summary: dict[str, Any], **params: Any) -> Any:
    """A jax-cpu run of the exported function checked against export-fn's sample."""
    body = {
        "artifact": files.put(Path(summary["file"]).read_bytes()),
        "reference": files.put(Path(summary["sample"]["file"]).read_bytes()),
        **params,
    }
    spec = {"workload": "exported", "params": body, "measure": {"samples": 3}}
    return run_job(JobSpec.model_validate(spec), files_dir=files.directory)


def test_the_examples_arrays_are_the_runs_inputs(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    status, summary, _ = export(capsys, model, "given", "--save-inputs", str(tmp_path / "all.npz"))
    assert status == EXIT_OK
    noted = summary["run_inputs"]
    assert noted["example"] == ["params/embed", "params/w", "tokens"] and noted["drawn"] == []
    assert (
        noted["says"] == f"the runs use the example's own values for 3 arguments ({noted['file']})"
    )
    where = Path(noted["file"])
    assert where == tmp_path / "given.inputs.npz"
    with np.load(where) as saved, np.load(tmp_path / "all.npz") as used:
        assert sorted(saved.files) == noted["example"]
        assert np.array_equal(saved["tokens"], np.arange(24).reshape(4, 6))
        rng = np.random.default_rng(5)  # the example's own weights, as it made them
        assert np.array_equal(saved["params/embed"], rng.standard_normal((32, 8), np.float32) * 0.5)
        assert all(np.array_equal(saved[n], used[n]) for n in saved.files)  # what ran here

    files = FileCache(tmp_path / "files")
    run = checked_run(files, summary, inputs=files.put(where.read_bytes()))
    assert run.valid and run.correctness is not None and run.correctness.passed
    # The sample was computed on the example's values: drawn ones fail the check.
    drawn = checked_run(files, summary)
    assert drawn.correctness is not None and not drawn.correctness.passed


def test_a_mixed_example_gives_its_arrays_and_the_rest_are_drawn_alike(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    status, summary, _ = export(capsys, model, "mixed", "--input-rules", json.dumps(RULES))
    assert status == EXIT_OK
    noted = summary["run_inputs"]
    assert noted["example"] == ["tokens"] and noted["drawn"] == ["params/embed", "params/w"]
    assert "2 arguments drawn from seed 0 under --input-rules" in noted["says"]
    with np.load(noted["file"]) as saved:
        assert saved.files == ["tokens"]
    # A worker draws the weights from the same seed and rules as export-fn did.
    files = FileCache(tmp_path / "files")
    inputs = files.put(Path(noted["file"]).read_bytes())
    run = checked_run(files, summary, inputs=inputs, input_rules=RULES)
    assert run.valid and run.correctness is not None and run.correctness.passed
    other = checked_run(files, summary, inputs=inputs, input_rules=RULES, seed=1)
    assert other.correctness is not None and not other.correctness.passed


def test_rules_for_given_arguments_are_refused_unless_inputs_are_generated(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    status, _, said = export(capsys, model, "given", "--input-rules", json.dumps(RULES))
    assert status == EXIT_USAGE
    assert "params.input_rules['params/*']: names only arguments whose values are given" in said
    assert "(or add --generated-inputs to draw them)" in said
    flags = ["--input-rules", json.dumps(RULES), "--generated-inputs"]
    status, summary, _ = export(capsys, model, "given", *flags)
    assert status == EXIT_OK
    noted = summary["run_inputs"]
    assert noted["file"] is None and noted["example"] == [] and len(noted["drawn"]) == 3
    assert "(--generated-inputs: the example gave shapes only)" in noted["says"]
    assert not (tmp_path / "given.inputs.npz").exists()
    files = FileCache(tmp_path / "files")
    run = checked_run(files, summary, input_rules=RULES)
    assert run.valid and run.correctness is not None and run.correctness.passed


def test_a_worker_refuses_an_inputs_file_that_names_no_argument(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    status, summary, _ = export(capsys, model, "given")
    assert status == EXIT_OK
    files = FileCache(tmp_path / "files")
    path = tmp_path / "typo.npz"
    np.savez(path, token=np.zeros((4, 6), np.int32))
    with pytest.raises(CatalogError) as caught:
        checked_run(files, summary, inputs=files.put(path.read_bytes()))
    assert caught.value.field == "params.inputs"
    assert "token names no argument (did you mean: tokens" in str(caught.value)
