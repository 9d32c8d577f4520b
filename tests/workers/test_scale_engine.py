"""Scale jobs through the real engine on 8 virtual CPU devices.

The test process itself has one CPU device (other tests count on it), and XLA fixes the
count when JAX starts, so the jobs run in one child process started with
--xla_force_host_platform_device_count=8 and come back as run results (JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workers.catalog import CatalogError
from workers.protocol import JobSpec, RunResult
from workers.run.engine import PathUnavailable, run_job

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MM = {"m": 64, "n": 48, "k": 32}

JOBS: dict[str, dict[str, Any]] = {
    "data": {"workload": "sharded-matmul", "params": {**MM, "sharding": "data"}},
    "tensor": {"workload": "sharded-matmul", "params": {**MM, "sharding": "tensor"}},
    "gathered": {"workload": "sharded-matmul", "params": {**MM, "sharding": "gathered"}},
    "custom-2d": {
        "workload": "sharded-matmul",
        "params": {
            **MM,
            "mesh": "2x4",
            "axes": "data,model",
            "sharding": "custom",
            "a_spec": "data,model",
            "b_spec": "model,-",
            "out_spec": "data,-",
        },
    },
    "all-reduce": {"workload": "collective", "params": {"kind": "all-reduce", "bytes": 4096}},
    "all-gather-y": {
        "workload": "collective",
        "params": {"kind": "all-gather", "bytes": 4096, "mesh": "2x4", "over": "y"},
    },
    "reduce-scatter-x": {
        "workload": "collective",
        "params": {"kind": "reduce-scatter", "bytes": 4096, "mesh": "2x4", "over": "x"},
    },
    "series": {
        "workload": "sharded-matmul",
        "params": {"m": 64, "n": 64, "k": 64, "sharding": "data"},
        "stages": ["compile", "execute", "scale"],
    },
    "series-weak": {
        "workload": "collective",
        "params": {"kind": "all-reduce", "bytes": 1024, "series": "weak"},
        "stages": ["compile", "scale"],
    },
    "too-many": {"workload": "collective", "params": {"devices": 16, "bytes": 4096}},
}

DRIVER = """
import json, sys
from workers.run.engine import run_job
from workers.protocol import JobSpec
for name, spec in json.loads(sys.stdin.read()).items():
    spec.setdefault("measure", {"samples": 3})
    try:
        run = run_job(JobSpec.model_validate(spec))
        print(json.dumps({"name": name, "run": json.loads(run.model_dump_json())}), flush=True)
    except Exception as exc:
        print(json.dumps({"name": name, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
"""


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    """Every job of JOBS, run once in a child process with 8 virtual CPU devices."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps(JOBS),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        item = json.loads(line)
        found[item["name"]] = RunResult.model_validate(item["run"]) if "run" in item else item
    return found


def kinds(run: RunResult) -> list[str]:
    assert run.hlo_summary is not None
    return [c.kind for c in run.hlo_summary.collectives]


def test_collectives_appear_exactly_where_the_sharding_implies(runs: dict[str, Any]) -> None:
    for name in ("data", "tensor", "gathered", "custom-2d"):
        assert runs[name].valid, (name, runs[name].correctness)
    # Batch sharded: every device has what it needs, no communication at all.
    assert kinds(runs["data"]) == []
    # Contraction sharded, output replicated: the partial sums are all-reduced.
    assert kinds(runs["tensor"]) == ["all-reduce"]
    # Sharded operands, replicated output: all-gathers and nothing else.
    gathered = kinds(runs["gathered"])
    assert gathered and set(gathered) == {"all-gather"}
    # k sharded over `model` only: an all-reduce within each row of the 2×4 mesh.
    (reduce,) = runs["custom-2d"].hlo_summary.collectives
    assert reduce.kind == "all-reduce"
    assert reduce.groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert reduce.bytes == (64 // 2) * 48 * 4  # each device's rows of C, in float32


def test_collectives_are_listed_with_shape_bytes_and_groups(runs: dict[str, Any]) -> None:
    (reduce,) = runs["tensor"].hlo_summary.collectives
    assert reduce.shape.startswith("f32[64,48]") and reduce.bytes == 64 * 48 * 4
    assert reduce.groups == [list(range(8))] and reduce.jax_op == "dot_general"
    ir = runs["tensor"].artifacts.hlo
    assert "all-reduce(" in ir


def test_shard_shapes_are_right(runs: dict[str, Any]) -> None:
    data = runs["data"].placement
    assert data.in_specs == {"a": "P('x', None)", "b": "P(None, None)"}
    assert data.out_spec == "P('x', None)"
    assert [s.shapes for s in data.shards] == [{"a": [8, 32], "b": [32, 48], "out": [8, 48]}] * 8
    assert data.shards[3].slices["a"] == "[24:32, :]" and data.shards[3].slices["b"] == "[:, :]"
    tensor = runs["tensor"].placement
    assert tensor.shards[0].shapes == {"a": [64, 4], "b": [4, 48], "out": [64, 48]}
    custom = runs["custom-2d"].placement
    assert custom.mesh_shape == [2, 4] and custom.axis_names == ["data", "model"]
    assert custom.axis_types == ["Auto", "Auto"]
    assert custom.shards[5].shapes == {"a": [32, 8], "b": [8, 48], "out": [32, 48]}
    assert custom.shards[5].slices["a"] == "[32:64, 8:16]"


def test_memory_per_device_includes_temporaries(runs: dict[str, Any]) -> None:
    memory = runs["tensor"].placement.memory
    assert len(memory) == 8
    for m in memory:
        assert m.argument_bytes == (64 * 4 + 4 * 48) * 4
        assert m.output_bytes == 64 * 48 * 4
        # The partial product lives in a temporary before the all-reduce.
        assert m.temp_bytes is not None and m.temp_bytes >= 64 * 48 * 4
    assert "memory_analysis()" in (runs["tensor"].placement.memory_note or "")


def test_intermediates_are_classified(runs: dict[str, Any]) -> None:
    rows = runs["tensor"].placement.intermediates
    by_op = {(r.op.split(":")[0].split(" (")[0], r.placement) for r in rows}
    assert ("parameter", "partitioned") in by_op
    assert ("all-reduce", "gathered-and-redistributed") in by_op
    product = next(r for r in rows if r.jax_op == "dot_general" and r.op.startswith("fusion"))
    assert product.placement == "partitioned" and "partial sums" in (product.detail or "")
    data_rows = runs["data"].placement.intermediates
    assert {r.placement for r in data_rows} == {"partitioned", "replicated"}
    b = next(r for r in data_rows if r.detail == "input b")
    assert b.placement == "replicated"


def test_each_collective_is_explained_by_its_sharding(runs: dict[str, Any]) -> None:
    (why,) = runs["tensor"].placement.explanations
    assert why.kind == "all-reduce" and "contracted dimension" in why.because
    assert "P(None, 'x')" in why.because
    gathered = runs["gathered"].placement.explanations
    assert {e.kind for e in gathered} == {"all-gather"}
    # Each all-gather is traced back to the value it moves: an input, or the product.
    for e in gathered:
        assert e.source in {"input a", "input b"} or "dot_general" in (e.source or "")
    assert all("replicated" in e.because for e in gathered)
    (none,) = runs["data"].placement.explanations
    assert none.kind == "none" and "no collective is needed" in none.because


def test_collective_workloads_are_correct_over_their_groups(runs: dict[str, Any]) -> None:
    for name, kind, group in (
        ("all-reduce", "all-reduce", 8),
        ("all-gather-y", "all-gather", 4),
        ("reduce-scatter-x", "reduce-scatter", 2),
    ):
        run = runs[name]
        assert run.valid and run.correctness.passed, (name, run.correctness)
        (collective,) = run.hlo_summary.collectives
        assert collective.kind == kind and len(collective.groups[0]) == group
    assert runs["all-gather-y"].hlo_summary.collectives[0].groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert runs["reduce-scatter-x"].hlo_summary.collectives[0].groups == [
        [0, 4],
        [1, 5],
        [2, 6],
        [3, 7],
    ]
    # Each device's shard of the reduce-scatter output is its half of its group's sum.
    shards = runs["reduce-scatter-x"].placement.shards
    assert shards[0].shapes == {"x": [1024], "out": [512]}


def test_strong_and_weak_series_are_labelled(runs: dict[str, Any]) -> None:
    series = runs["series"].scaling
    assert series is not None
    assert "structure real" in series.label and "not hardware scaling" in series.label
    assert "not separable" in (series.per_device_note or "")
    points = {(p.mode, p.devices): p for p in series.points}
    assert set(points) == {(m, d) for m in ("strong", "weak") for d in (1, 2, 4, 8)}
    for p in series.points:
        assert p.correct and p.median_s is not None and p.median_s > 0
        assert p.boundary.value == "host-sync" and len(p.samples_s) == 3
        assert p.collectives == []  # data parallel at every size
    # Strong: the global problem stays, the shards shrink; weak: the reverse.
    assert points[("strong", 2)].global_shapes["a"] == [64, 64]
    assert points[("strong", 2)].per_device_shapes["a"] == [32, 64]
    assert points[("weak", 2)].global_shapes["a"] == [16, 64]
    assert points[("weak", 2)].per_device_shapes["a"] == [8, 64]
    weak = runs["series-weak"].scaling
    assert {p.mode for p in weak.points} == {"weak"}
    assert [p.per_device_shapes["x"] for p in weak.points] == [[256]] * 4
    assert runs["series-weak"].measurements == []  # the job asked for no execute stage


def test_cpu_runs_say_the_timings_are_not_hardware_scaling(runs: dict[str, Any]) -> None:
    run = runs["tensor"]
    assert run.placement.note and "not hardware scaling" in run.placement.note
    assert any("virtual CPU devices" in w for w in run.warnings)
    assert run.environment.device_count == 8


def test_a_job_never_runs_on_fewer_devices_than_asked(runs: dict[str, Any]) -> None:
    assert "PathUnavailable" in runs["too-many"]["error"]
    assert "spans 16 devices" in runs["too-many"]["error"]
    # This test process has one CPU device: a default (8-device) job is refused here too.
    with pytest.raises(PathUnavailable, match="spans 8 devices"):
        run_job(JobSpec.model_validate({"workload": "collective", "params": {"bytes": 64}}))
    with pytest.raises(CatalogError) as caught:
        run_job(JobSpec.model_validate({"workload": "collective", "params": {"mesh": "3"}}))
    assert caught.value.field == "params.mesh"


def test_boundary_run_starts_a_child_with_enough_devices(
    capfd: pytest.CaptureFixture[str],
) -> None:
    from workers.cli.run import run_command

    argv = ["collective", "kind=all-gather", "bytes=256", "devices=4", "--samples", "2"]
    status = run_command([*argv, "--json"])
    out, err = capfd.readouterr()
    assert status == 0, err[-2000:]
    lines = out.strip().splitlines()
    assert len(lines) == 1
    run = RunResult.model_validate_json(lines[0])
    assert run.environment.device_count == 4 and run.valid
    assert run.placement is not None and len(run.placement.shards) == 4
    bad = run_command(["sharded-matmul", "mesh=3x3", "--json"])
    assert bad == 2
    assert "params.mesh" in capfd.readouterr().err
