"""The HLO diff on real compiles, made here without the hardware (libtpu, and JAX's CUDA
plugin with a target description): a user's own MLP train step, exported with a symbolic
batch by `boundary export-fn` from a folder of its own, compiled for v6e:1x1, h100:1 and
b200:1 with and without Triton's GEMMs; and a sharded matmul for a TPU v6e slice and for
eight H100s. Each program is compiled once per module."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.ir.hlo_diff import HloDiff, diff_modules
from app.ir.hlo_match import compatible, same_size
from app.pages.compare.hlo_changes import report_of
from tests.workers.own_exports import export_fn
from workers.files import FileCache
from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = pytest.mark.slow

MLP = '''"""My MLP and its training step."""

import jax
import jax.numpy as jnp


def init(key, sizes=(512, 4096, 4096, 10)):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        w = jax.random.normal(sub, (fan_in, fan_out)) / fan_in**0.5
        params.append({"w": w, "b": jnp.zeros((fan_out,))})
    return params


def forward(params, x):
    *hidden, last = params
    for layer in hidden:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ last["w"] + last["b"]


def loss(params, x, y):
    logits = forward(params, x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def train_step(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    params = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
    return params, value


def example():
    params = init(jax.random.key(0))
    x = jax.ShapeDtypeStruct((8, 512), jnp.float32)
    y = jax.ShapeDtypeStruct((8, 10), jnp.float32)
    return {"params": params, "x": x, "y": y}
'''
HIDDEN = next(n for n, line in enumerate(MLP.split("\n"), 1) if 'x @ layer["w"]' in line)
"""The line of the hidden layers' matmul."""
LAST = HIDDEN + 1
"""The line of the last layer's matmul."""

SHARDED: dict[str, dict[str, Any]] = {
    "v6e": {"workload": "sharded-matmul", "path": "jax-tpu", "target": "v6e:2x4",
            "params": {"sharding": "tensor"}},
    "h100": {"workload": "sharded-matmul", "path": "jax-gpu", "target": "h100:8",
             "params": {"sharding": "tensor"}},
}  # fmt: skip
MLP_JOBS: dict[str, tuple[str, str, dict[str, bool]]] = {
    "v6e": ("jax-tpu", "v6e:1x1", {}),
    "h100": ("jax-gpu", "h100:1", {}),
    "triton": ("jax-gpu", "b200:1", {}),
    "triton again": ("jax-gpu", "b200:1", {}),
    "cublas": ("jax-gpu", "b200:1", {"xla_gpu_enable_triton_gemm": False}),
}


def _hlo(spec: dict[str, Any], files: Path | None = None) -> str:
    run = run_job(JobSpec.model_validate(spec), files_dir=files)
    assert run.artifacts.hlo, spec
    return run.artifacts.hlo


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The user's train step, exported from the user's own folder with a symbolic batch,
    then compiled (batch 8) through the worker's own code for each target."""
    folder = tmp_path_factory.mktemp("my-model")
    (folder / "mlp.py").write_text(MLP)
    artifact = folder / "train_step.jaxexport"
    done = export_fn(
        ["mlp:train_step", "--example", "mlp:example", "--symbolic", "b=x,y", "-o", str(artifact)],
        folder,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    files = FileCache(folder / "files")
    params = {"artifact": files.put(artifact.read_bytes()), "dims": {"b": 8}}
    return {
        name: _hlo(
            {"workload": "exported", "path": path, "target": target, "params": params,
             "compiler_options": options},
            files.directory,
        )
        for name, (path, target, options) in MLP_JOBS.items()
    }  # fmt: skip


@pytest.fixture(scope="module")
def sharded() -> dict[str, str]:
    return {name: _hlo(spec) for name, spec in SHARDED.items()}


def counts(d: HloDiff) -> tuple[int, int, int]:
    return len(d.changed), len(d.only_a), len(d.only_b)


def assert_no_pair_across_kinds(d: HloDiff) -> None:
    """A reduction never with a GEMM; anything else of different work, or of other
    element counts, only as a guess."""
    for p in [*d.identical, *d.changed]:
        x, y = d.a.instrs[p.a], d.b.instrs[p.b]
        shown = f"{x.name} ({x.work}, {x.shape}) = {y.name} ({y.work}, {y.shape}), {p.step}"
        assert {x.work, y.work} != {"gemm", "reduction"}, shown
        assert compatible(x, y) != "no", shown
        if not p.guess:
            assert x.work == y.work and same_size(x, y), shown


def assert_rows_in_the_users_words(report: dict[str, Any]) -> None:
    """Every changed row with a source line leads with it and the JAX operation."""
    named = [r for r in report["changed"] if r["a"]["source"] or r["b"]["source"]]
    assert len(named) >= 3
    for row in named:
        assert re.fullmatch(r"mlp\.py:\d+ \w+( \(gradient\))?", row["label"] or ""), row
        assert row["step"] and isinstance(row["guess"], bool)


def test_a_compile_against_itself_and_its_repeat_changes_nothing(
    mlp: dict[str, str], sharded: dict[str, str]
) -> None:
    for other in ("triton", "triton again"):
        d = diff_modules(mlp["triton"], mlp[other])
        assert counts(d) == (0, 0, 0) and d.identical
    assert counts(diff_modules(sharded["v6e"], sharded["v6e"])) == (0, 0, 0)


def test_triton_gemms_off_names_each_matmul_that_became_a_cublaslt_call(
    mlp: dict[str, str],
) -> None:
    d = diff_modules(mlp["triton"], mlp["cublas"])
    assert_no_pair_across_kinds(d)
    report = report_of(d, "a", "b", {"a": "XLA:GPU", "b": "XLA:GPU"})
    assert_rows_in_the_users_words(report)
    said = " ".join(report["sentences"])
    assert re.search(
        rf"mlp\.py:{LAST}: the matmul \(dot_general\) ran as a Triton fusion \([\w.]+\) in A "
        r"and as a cuBLASLt call \([\w.\-]+\) in B",
        said,
    ), said
    gemms = [r for r in report["changed"] if "gemm" in (r["a"]["work"], r["b"]["work"])]
    assert all(r["a"]["library_kind"] == "Triton" for r in gemms), gemms
    assert all(r["b"]["library_kind"] == "cuBLASLt" for r in gemms), gemms
    assert {r["label"] for r in gemms} >= {f"mlp.py:{LAST} dot_general"}


def test_tpu_against_gpu_pairs_no_instructions_across_kinds_and_speaks_of_lines(
    mlp: dict[str, str],
) -> None:
    d = diff_modules(mlp["v6e"], mlp["h100"])
    assert_no_pair_across_kinds(d)
    report = report_of(d, "a", "b", {"a": "libtpu", "b": "XLA:GPU"})
    assert_rows_in_the_users_words(report)
    kernels = [s for s in report["sentences"] if s.startswith("mlp.py:")]
    assert kernels, report["sentences"]
    # The first layer's matmul is a GEMM on both: a TPU output fusion, a Triton fusion.
    first = [r for r in report["changed"] if r["label"] == f"mlp.py:{HIDDEN} dot_general"]
    assert any({r["a"]["work"], r["b"]["work"]} == {"gemm"} for r in first), first


def test_the_all_reduce_is_matched_across_tpu_and_gpu(sharded: dict[str, str]) -> None:
    d = diff_modules(sharded["v6e"], sharded["h100"])
    assert_no_pair_across_kinds(d)
    (collective,) = d.collectives
    assert collective.a is not None and collective.b is not None
    tpu, gpu = d.a.instrs[collective.a], d.b.instrs[collective.b]
    assert (tpu.op, gpu.op) == ("all-reduce", "all-reduce")
    assert tpu.name != gpu.name and tpu.layout != gpu.layout  # all-reduce, all-reduce-start
    assert tpu.result_bytes == gpu.result_bytes == 512 * 512 * 4
    report = report_of(d, "a", "b", {"a": "libtpu", "b": "XLA:GPU"})
    (row,) = report["collectives"]
    assert row["bytes_a"] == row["bytes_b"] == 512 * 512 * 4
    assert row["groups_a"] and row["groups_b"]
    assert row["label"] and row["label"].startswith("sharded_matmul.py:")
    said = " ".join(report["sentences"])
    assert "The all-reduce is on both sides, moving 1.05 MB per device" in said, said


def test_most_source_lines_of_the_tpu_and_gpu_programs_are_paired(mlp: dict[str, str]) -> None:
    """Of the instructions that compute and name a source line (a multi-output fusion's
    tuple elements and layout changes aside), most are paired, split or merged; every
    other one is listed as only on its side."""
    d = diff_modules(mlp["v6e"], mlp["triton"])
    for g, paired, alone in (
        (d.a, {p.a for p in [*d.identical, *d.changed]} | {i for r in d.splits + d.merges
                                                          for i in r.a}, set(d.only_a)),
        (d.b, {p.b for p in [*d.identical, *d.changed]} | {j for r in d.splits + d.merges
                                                          for j in r.b}, set(d.only_b)),
    ):  # fmt: skip
        sourced = [k for k in g.units if g.instrs[k].source]
        computing = [k for k in sourced if g.instrs[k].work not in ("tuple", "layout")]
        matched = [k for k in computing if k in paired]
        assert len(computing) >= 12
        assert len(matched) >= 0.6 * len(computing), (len(matched), len(computing))
        assert set(sourced) - paired <= alone  # every unmatched one is listed
        assert paired.isdisjoint(alone) and paired | alone == set(g.units)
