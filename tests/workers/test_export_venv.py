"""`boundary export-fn` where a model lives: a fresh virtual environment with the model's
own jax and Boundary's light install from this checkout (`pip install 'CHECKOUT[export]'`),
which brings none of the server's dependencies. Never `pip install boundary` by name:
that name on the package index belongs to another project."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from workers.export.header import read_header

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

MODEL = """
import jax.numpy as jnp

def step(params, tokens):
    hidden = params["embed"][tokens] @ params["dense"]["kernel"]
    return {"logits": hidden, "norm": jnp.sqrt((hidden * hidden).sum())}

def example():
    return (
        {"embed": jnp.ones((16, 8)), "dense": {"kernel": jnp.ones((8, 4))}},
        jnp.zeros((2, 3), jnp.int32),
    )
"""


def run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done


def test_export_fn_runs_in_a_model_environment_without_the_server(tmp_path: Path) -> None:
    # What pip installs from: the checkout's package, not the worktree itself (a build
    # writes into the folder it builds).
    checkout = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("app", "workers"):
        shutil.copytree(ROOT / part, checkout / part, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    venv = tmp_path / "model-env"
    # The test's own pip installs into it (`--python`), and leaves the byte-compiling of
    # jaxlib and scipy to the imports that need it: the same packages, a third of the CPU.
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install"]
    pip += ["--quiet", "--no-compile"]
    run([*pip, f"jax=={jax.__version__}"], tmp_path)  # the model's own jax, first
    run([*pip, f"{checkout}[export]"], tmp_path)
    python = str(venv / "bin/python")
    found = run(
        [
            python,
            "-c",
            "import importlib.util as u, json; print(json.dumps({n: u.find_spec(n) "
            "is not None for n in ('jax', 'httpx', 'pydantic', 'fastapi', 'uvicorn', 'libtpu')}))",
        ],
        tmp_path,
    )
    assert json.loads(found.stdout) == {
        "jax": True,
        "httpx": True,
        "pydantic": False,
        "fastapi": False,
        "uvicorn": False,
        "libtpu": False,
    }
    model = tmp_path / "project"
    model.mkdir()
    (model / "mymodel.py").write_text(MODEL)
    # A file named like a library jax imports: the command appends the model's folder to
    # sys.path, never puts it first, so this one is never imported.
    (model / "opt_einsum.py").write_text(
        "raise ImportError('the project folder shadowed a library')"
    )
    done = run(
        [
            str(venv / "bin/boundary"),
            "export-fn",
            "mymodel:step",
            "--example",
            "mymodel:example",
            "--save-output-sample",
            "5",
        ],
        model,
    )
    summary = json.loads(done.stdout)
    assert summary["arguments"] == ["params/dense/kernel", "params/embed", "tokens"]
    assert summary["results"] == ["logits", "norm"]
    header = read_header((model / "step.jaxexport").read_bytes())  # the server's reading
    assert header.function_name == "step" and header.platforms == ("cpu", "cuda", "tpu")
    assert (model / "step.sample.npz").is_file()
    # The example's arrays are the runs' inputs, written beside the artifact.
    assert summary["run_inputs"]["file"] == "step.inputs.npz"
    assert (model / "step.inputs.npz").is_file()
    refused = subprocess.run(
        [str(venv / "bin/boundary"), "run", "matmul"],
        cwd=model,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0 and "pydantic" in refused.stderr  # the server's side is not here
