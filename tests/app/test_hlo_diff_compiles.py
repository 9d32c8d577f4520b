"""The HLO diff on real compiles, made here without the hardware (libtpu, and JAX's CUDA
plugin with a target description): a B200 matmul with Triton's GEMMs on and off, a
sharded matmul for a TPU v6e slice and for eight H100s, and the tests' own exported
model for one v6e chip and one B200. Each program is compiled once per module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.ir.hlo_diff import HloDiff, diff_modules
from app.pages.compare.hlo_changes import report_of
from tests.workers.own_exports import export_program
from workers.files import FileCache
from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = pytest.mark.slow

GEMM = {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}
JOBS: dict[str, dict[str, Any]] = {
    "triton": {"workload": "matmul", "path": "jax-gpu", "target": "b200:1", "params": GEMM},
    "cublas": {
        "workload": "matmul",
        "path": "jax-gpu",
        "target": "b200:1",
        "params": GEMM,
        "compiler_options": {"xla_gpu_enable_triton_gemm": False},
    },
    "v6e": {
        "workload": "sharded-matmul",
        "path": "jax-tpu",
        "target": "v6e:2x4",
        "params": {"sharding": "tensor"},
    },
    "h100": {
        "workload": "sharded-matmul",
        "path": "jax-gpu",
        "target": "h100:8",
        "params": {"sharding": "tensor"},
    },
}


def _hlo(spec: dict[str, Any], files: Path | None = None) -> str:
    run = run_job(JobSpec.model_validate(spec), files_dir=files)
    assert run.artifacts.hlo, spec
    return run.artifacts.hlo


@pytest.fixture(scope="module")
def compiled() -> dict[str, str]:
    """Each job's optimized HLO, and the Triton GEMM's compiled a second time (a repeat)."""
    texts = {name: _hlo(spec) for name, spec in JOBS.items()}
    texts["triton again"] = _hlo(JOBS["triton"])
    return texts


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The own model's forward pass, exported as a user does, compiled for v6e:1x1 and
    b200:1."""
    folder = tmp_path_factory.mktemp("hlo-diff-export")
    program = export_program("forward", folder)
    files = FileCache(folder / "files")
    params = {"artifact": files.put(program.artifact.read_bytes())}
    return {
        target: _hlo(
            {"workload": "exported", "path": path, "target": target, "params": params},
            files.directory,
        )
        for path, target in (("jax-tpu", "v6e:1x1"), ("jax-gpu", "b200:1"))
    }


def counts(d: HloDiff) -> tuple[int, int, int]:
    return len(d.changed), len(d.only_a), len(d.only_b)


def test_a_compile_against_itself_and_its_repeat_changes_nothing(
    compiled: dict[str, str],
) -> None:
    for other in ("triton", "triton again"):
        d = diff_modules(compiled["triton"], compiled[other])
        assert counts(d) == (0, 0, 0) and d.identical
    assert counts(diff_modules(compiled["v6e"], compiled["v6e"])) == (0, 0, 0)


def test_triton_gemm_off_makes_the_gemm_a_cublas_call(compiled: dict[str, str]) -> None:
    for a, b in (("triton", "cublas"), ("cublas", "triton")):
        d = diff_modules(compiled[a], compiled[b])
        assert len(d.changed) <= 6
        kinds = {(d.a.instrs[p.a].kind or "", d.b.instrs[p.b].kind or "") for p in d.changed}
        triton = "kCustom/__triton_nested_gemm_fusion"
        expected = (triton, "__cublas$lt$matmul")
        assert (expected if a == "triton" else expected[::-1]) in kinds
    report = report_of(diff_modules(compiled["triton"], compiled["cublas"]), "a", "b", {
        "a": "XLA:GPU", "b": "XLA:GPU"
    })  # fmt: skip
    assert any(
        "(a Triton fusion) became a cuBLASLt custom call (custom-call" in s
        for s in report["sentences"]
    ), report["sentences"]


def test_the_all_reduce_is_matched_across_tpu_and_gpu(compiled: dict[str, str]) -> None:
    d = diff_modules(compiled["v6e"], compiled["h100"])
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
    said = " ".join(report["sentences"])
    assert "The all-reduce is on both sides, moving 1.05 MB per device" in said, said


def test_an_exported_model_for_tpu_and_gpu_pairs_most_of_its_source_lines(
    exported: dict[str, str],
) -> None:
    d = diff_modules(exported["v6e:1x1"], exported["b200:1"])
    for g, paired, alone in (
        (d.a, {p.a for p in [*d.identical, *d.changed]} | {i for r in d.splits + d.merges
                                                          for i in r.a}, set(d.only_a)),
        (d.b, {p.b for p in [*d.identical, *d.changed]} | {j for r in d.splits + d.merges
                                                          for j in r.b}, set(d.only_b)),
    ):  # fmt: skip
        sourced = [k for k in g.units if g.instrs[k].source]
        matched = [k for k in sourced if k in paired]
        assert len(sourced) >= 20
        assert len(matched) >= 0.6 * len(sourced), (len(matched), len(sourced))
        assert set(sourced) - set(matched) <= alone  # every unmatched one is listed
        assert paired.isdisjoint(alone) and paired | alone == set(g.units)
