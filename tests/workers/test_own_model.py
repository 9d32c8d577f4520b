"""The tests' own model (a transformer forward with nested weight dicts and token ids, an
optax train step returning several results, that step over 8 devices), exported with
`boundary export-fn --example` as a user would, then read, compiled for targets and run
by the worker's own code in this process (the server and a real worker: test_own_model_e2e)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from app.ir.sources import source_map
from tests.workers import own_model
from tests.workers.own_exports import ROOT
from workers.catalog import CatalogError
from workers.export.header import read_header
from workers.export.meshes import flat_call
from workers.export.trees import plain_state, plain_tree
from workers.files import FileCache
from workers.measure.faults import perturbed
from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = pytest.mark.slow


def job(files: FileCache, exported: Any, **fields: Any) -> JobSpec:
    """A job for an exported program: its artifact stored, its rules and sample given."""
    params: dict[str, Any] = {"artifact": files.put(exported.artifact.read_bytes())}
    if fields.pop("rules", True):
        params["input_rules"] = exported.rules
    if fields.pop("reference", True):
        params["reference"] = files.put(exported.sample.read_bytes())
    body = {"workload": "exported", "params": params, "measure": {"samples": 3}, **fields}
    return JobSpec.model_validate(body)


@pytest.fixture
def files(tmp_path: Path) -> FileCache:
    return FileCache(tmp_path / "files")


def jax_names(treedef: Any, results: bool) -> list[str]:
    """Names from jax's own tree paths, independently of the header reader."""
    tree = jax.tree.unflatten(treedef, list(range(treedef.num_leaves)))
    out: list[str] = [""] * treedef.num_leaves
    for path, index in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        if results:
            parts = [f"out{parts[0]}", *parts[1:]] if parts else ["out0"]
        else:
            parts = [f"arg{parts[1]}", *parts[2:]] if parts[0] == "0" else parts[1:]
        out[index] = "/".join(parts)
    return out


def test_arguments_and_results_are_named_by_their_paths(own_exports: dict[str, Any]) -> None:
    forward, train, dp = own_exports["forward"], own_exports["train"], own_exports["dp"]
    assert "params/blocks/0/attn/key/kernel" in forward.summary["arguments"]
    assert "tokens" in forward.summary["arguments"] and forward.summary["results"] == ["out0"]
    names = train.summary["results"]
    assert names[0] == "out0"  # the loss
    assert "out1/blocks/0/attn/key/kernel" in names  # the new weights
    assert "out2/0/mu/blocks/0/attn/key/kernel" in names and "out2/0/count" in names  # adamw
    assert "opt_state/0/nu/embed/embedding" in train.summary["arguments"]
    assert dp.summary["nr_devices"] == 8 and train.summary["nr_devices"] == 1
    for exported in own_exports.values():  # the server's reading agrees with jax's own
        data = exported.artifact.read_bytes()
        exp = jax.export.deserialize(bytearray(data))
        header = read_header(data)
        assert list(header.argument_names) == jax_names(exp.in_tree, results=False)
        assert list(header.result_names) == jax_names(exp.out_tree, results=True)
        assert header.function_name == ("forward" if exported.name == "forward" else "train_step")


def test_the_artifact_computes_what_the_function_does(own_exports: dict[str, Any]) -> None:
    exp = jax.export.deserialize(bytearray(own_exports["train"].artifact.read_bytes()))
    params, opt_state, tokens = own_model.train_example()
    plain = {
        "opt_state": plain_tree(opt_state).plain,
        "params": plain_tree(params).plain,
        "tokens": tokens,
    }
    flat = jax.tree.leaves(((), plain))
    loss, *rest = flat_call(exp)(*flat)
    # The function itself, jitted as a user runs it (op by op it takes four times the CPU).
    want_loss, want_params, _ = jax.jit(own_model.train_step)(params, opt_state, tokens)
    assert float(loss) == pytest.approx(float(want_loss), rel=1e-5)
    names = read_header(own_exports["train"].artifact.read_bytes()).result_names
    kernel = rest[names.index("out1/blocks/0/attn/key/kernel") - 1]
    np.testing.assert_allclose(
        kernel, want_params["blocks"][0]["attn"]["key"]["kernel"], rtol=1e-5, atol=1e-6
    )


def test_flax_nnx_and_equinox_modules_export_as_plain_dicts(tmp_path: Path) -> None:
    import equinox as eqx
    from flax import nnx

    from workers.export.trees import export_example

    def apply(model: Any, x: jax.Array) -> jax.Array:
        out: jax.Array = model(x)
        return out

    linear = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    found = export_example(apply, (linear, jax.numpy.ones((2, 3))), ["cpu"])
    assert list(found.header.argument_names) == ["model/bias", "model/kernel", "x"]
    state = plain_state(nnx.split(linear)[1])
    assert sorted(state) == ["bias", "kernel"] and isinstance(state["kernel"], jax.Array)
    exp = jax.export.deserialize(bytearray(found.data))
    flat = jax.tree.leaves(((), {"model": plain_state(linear), "x": jax.numpy.ones((2, 3))}))
    np.testing.assert_allclose(flat_call(exp)(*flat)[0], linear(jax.numpy.ones((2, 3))), rtol=1e-6)

    mlp = eqx.nn.MLP(3, 2, 8, 1, key=jax.random.key(0))  # holds activation functions
    found = export_example(apply, (mlp, jax.numpy.ones((3,))), ["cpu"])
    assert "model/layers/0/weight" in found.header.argument_names
    assert all(not n.endswith("activation") for n in found.header.argument_names)

    # `--state` writes a state's arrays by path, for inputs or for a look at the names.
    (tmp_path / "state.py").write_text(
        "from flax import nnx\nmodel = nnx.Linear(3, 4, rngs=nnx.Rngs(0))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "export-fn", "--state", "state.py:model"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["arrays"] == {"bias": "float32[4]", "kernel": "float32[3,4]"}
    with np.load(tmp_path / "state.npz") as saved:
        assert sorted(saved.files) == ["bias", "kernel"]


def test_the_cpu_run_checks_every_result_against_the_sample(
    own_exports: dict[str, Any], files: FileCache
) -> None:
    train = own_exports["train"]
    run = run_job(job(files, train), files_dir=files.directory)
    c = run.correctness
    assert run.valid and c is not None and c.passed and c.checked
    assert c.reference == "an uploaded sample of the reference outputs"
    assert len(c.results) == len(train.summary["results"]) and all(r.passed for r in c.results)
    assert all(r.sampled is not None and r.sampled <= 64 for r in c.results)
    assert [i.name for i in run.inputs] == train.summary["arguments"]
    with perturbed(0.01):  # the same results, judged 1 % off: the worst is named
        failed = run_job(job(files, train), files_dir=files.directory)
    f = failed.correctness
    assert f is not None and not failed.valid and not f.passed
    assert f.worst in [r.name for r in f.results if not r.passed]
    assert f.detail is not None and "sampled elements" in f.detail
    assert failed.measurements[0].stats is None


def test_default_draws_break_adamw_and_the_run_says_which_result(
    own_exports: dict[str, Any], files: FileCache
) -> None:
    # Standard normal second moments: adamw takes their square root, the weights go NaN.
    train = own_exports["train"]
    run = run_job(job(files, train, rules=False, reference=False), files_dir=files.directory)
    c = run.correctness
    assert c is not None and not run.valid and not c.passed
    assert c.worst is not None and c.worst.startswith(("out1/", "out2/"))
    assert "NaN" in (c.detail or "")


def test_the_eight_device_step_runs_on_eight_virtual_cpus(own_exports: dict[str, Any]) -> None:
    dp = own_exports["dp"]
    command = [sys.executable, "-m", "app.cli", "run", "exported", f"artifact=@{dp.artifact}"]
    command += [f"reference=@{dp.sample}", f"input_rules={json.dumps(dp.rules)}"]
    command += ["--samples", "3", "--json"]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout)
    assert run["environment"]["device_count"] == 8  # a fresh process with 8 virtual CPUs
    assert run["correctness"]["passed"] and run["valid"]
    assert len(run["correctness"]["results"]) == len(dp.summary["results"])
    assert "all-reduce" in run["artifacts"]["hlo"]


def test_targets_place_the_program_and_name_the_users_lines(
    own_exports: dict[str, Any], files: FileCache
) -> None:
    dp, forward = own_exports["dp"], own_exports["forward"]
    wide = run_job(
        job(files, dp, path="jax-tpu", target="v6e:4x4", stages=["compile"]),
        files_dir=files.directory,
    )
    assert wide.target is not None and wide.target.mesh == (
        "a mesh of 8 of the 16 devices of v6e:4x4 (the first 8 in topology order): the "
        "artifact was exported for 8"
    )
    assert wide.hlo_summary is not None
    assert [c.kind for c in wide.hlo_summary.collectives].count("all-reduce") >= 1
    hlo = wide.artifacts.hlo or ""
    files_named = set(re.findall(r'source_file="([^"]+)"', hlo))
    assert str(own_model.__file__) in files_named  # the user's lines (and optax's) …
    assert not [f for f in files_named if f"{ROOT}/workers/" in f or f.endswith("app/cli.py")]
    assert not re.search(r'op_name="[^"]*#\d+', hlo)  # no tag left behind
    # The pages read the same positions, and never Boundary's own frames: the StableHLO's
    # locations hold the export wrapper's and the worker's call, which the view drops.
    stablehlo = (wide.artifacts.stablehlo or "").splitlines()
    assert "workers/export/trees.py" in "\n".join(stablehlo)
    for name, text in (("hlo", hlo.splitlines()), ("stablehlo", stablehlo)):
        named = source_map(name, text).files()
        assert str(own_model.__file__) in named
        assert not [f for f in named if f.startswith(f"{ROOT}/workers/")]
    dot = next(line for line in hlo.splitlines() if "dot_general" in line and "source_line" in line)
    line = int(re.search(r"source_line=(\d+)", dot)[1])  # type: ignore[index]
    assert "@" in Path(own_model.__file__).read_text().splitlines()[line - 1]  # a matmul line

    one = run_job(
        job(files, forward, path="jax-gpu", target="h100:8", stages=["compile"]),
        files_dir=files.directory,
    )
    assert one.target is not None and one.target.mesh == (
        "one device of h100:8's 8 (the artifact was exported for one)"
    )
    assert one.artifacts.ptx and one.hlo_summary is not None and not one.hlo_summary.collectives


def test_a_target_with_fewer_devices_or_another_platform_is_refused(
    own_exports: dict[str, Any], files: FileCache, tmp_path: Path
) -> None:
    dp = own_exports["dp"]
    with pytest.raises(CatalogError) as caught:
        run_job(job(files, dp, path="jax-gpu", target="b200:1"), files_dir=files.directory)
    assert caught.value.field == "target"
    assert "exported for 8 devices and b200:1 has 1" in str(caught.value)
    from tests.workers.own_exports import export_program

    cpu_only = export_program("forward", tmp_path, "--platforms", "cpu")
    refused = (
        r"exported for cpu only, and v6e:1x1 needs tpu: export it again with --platforms cpu,tpu"
    )
    with pytest.raises(CatalogError, match=re.escape(refused)):
        run_job(job(files, cpu_only, path="jax-tpu", target="v6e:1x1"), files_dir=files.directory)
