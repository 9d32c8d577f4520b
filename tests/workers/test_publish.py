"""The publish gate: with a failing check, no speed-bearing field survives anywhere.

Every runner is driven for real (the engine for each workload and mode, the shape sweep,
scale series, exported functions, a group's report); the CUDA path, which needs a GPU
to execute, hands the publish step the same shape of measurements it does. The walk
looks at the run's JSON by field name, so a speed added under a new name that follows
the house naming (`*_per_s`, `median_s`, `samples_s`, `stats`, …) is caught too.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from tests.workers.conftest import SMALL
from workers.cli.export_fn import export_function
from workers.compiler.environment import detect_environment
from workers.files import FileCache
from workers.measure.faults import perturbed
from workers.measure.publish import Measured, RateBasis, Work, regroup
from workers.measure.stats import summarize
from workers.protocol import (
    BoundaryId,
    CachePolicy,
    Correctness,
    GroupProcess,
    GroupReport,
    JobSpec,
    Measurement,
    PathId,
    RunResult,
    ScalingPoint,
    ScalingSeries,
    StageId,
)
from workers.run.engine import run_job

SPEED_KEYS = frozenset(
    {
        "samples_s",
        "stats",
        "median_s",
        "steady_pass_s",
        "steady_call_s",
        "first_pass_s",
        "warm_up",
        "comparison",
        "profile",
        "speedup_over_kernel",
        "harness_seconds",
        "stopped_because",
        "warmup_samples_s",
        "unreported_s",
        "warmed",
    }
)
"""Fields whose value is a time or rate of executing the output (stage times are not)."""
MEASUREMENT_KEYS = frozenset({"shape", "warmup_discarded", "shape_checked"})
"""A measurement's facts about its samples: no result when the samples are none."""


def speeds(value: Any, where: str = "run") -> Iterator[str]:
    """The path of every speed-bearing field of a run's JSON that holds something."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if where == "run" and key == "job":
                continue  # the request, not a result
            here = f"{where}.{key}"
            bearing = key in SPEED_KEYS or key.endswith("_per_s")
            if ".measurements[" in here and key in MEASUREMENT_KEYS:
                bearing = inner is not None  # a count of 0 or a False is still a fact
            elif bearing and inner in (None, False, [], {}):
                bearing = False
            if bearing:
                yield here
            yield from speeds(inner, here)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from speeds(inner, f"{where}[{i}]")


def found(run: RunResult) -> list[str]:
    return list(speeds(run.model_dump(mode="json")))


def spec(workload: str, params: dict[str, Any] | None = None, **extra: Any) -> JobSpec:
    body = {
        "workload": workload,
        "params": {**SMALL.get(workload, {}), **(params or {})},
        "measure": {"samples": 3, **extra.pop("measure", {})},
        **extra,
    }
    return JobSpec.model_validate(body)


ENGINE_CASES: dict[str, JobSpec] = {
    **{f"{name} latency": spec(name) for name in SMALL},
    "matmul throughput": spec("matmul", measure={"mode": "throughput", "calls_per_sample": 2}),
    "matmul application": spec("matmul", measure={"mode": "application"}),
    "matmul profiled": spec("matmul", measure={"profile": True}),
    "sharded-matmul scale series": spec("sharded-matmul", stages=["compile", "execute", "scale"]),
    "shape-sweep": spec("shape-sweep", {"shapes": [3, 5, 8], "features": 8}),
}


@pytest.mark.parametrize("case", list(ENGINE_CASES))
def test_a_failing_check_leaves_no_speed_anywhere(case: str) -> None:
    job = ENGINE_CASES[case]
    honest = run_job(job)
    assert honest.valid and found(honest), "a passing run shows its speeds: the walk sees them"
    with perturbed(0.5):
        failed = run_job(job)
    assert not failed.valid and failed.correctness is not None and not failed.correctness.passed
    assert found(failed) == []
    # What is not a speed of the output stays: stage times and the work counts.
    assert failed.stage_seconds.compile is not None
    assert failed.rates is not None and failed.rates.flops == honest.rates.flops  # type: ignore[union-attr]
    assert any("correctness failed" in w for w in failed.warnings)


def _scaled(x: Any) -> Any:
    return x * 2.0


def test_an_exported_function_with_a_wrong_reference_shows_no_speed(tmp_path: Path) -> None:
    data, _ = export_function(_scaled, [("float32", (16, 8))], ["cpu"])
    files = FileCache(tmp_path)
    buffer = io.BytesIO()
    np.savez(buffer, out0=np.zeros((16, 8), dtype=np.float32) + 1.0)
    params = {"artifact": files.put(data), "reference": files.put(buffer.getvalue())}
    job = JobSpec.model_validate(
        {"workload": "exported", "params": params, "measure": {"samples": 3}}
    )
    run = run_job(job, files_dir=tmp_path)
    assert not run.valid and found(run) == []


def _environment() -> Any:
    return detect_environment(jax.devices()[0], CachePolicy.COLD, None, jax.devices())


def _measurement(subject: str | None, boundary: BoundaryId, samples: list[float]) -> Measurement:
    return Measurement(
        boundary=boundary, samples_s=samples, stats=summarize(samples), subject=subject
    )


def _cuda_like(kernel_passes: bool, cublas_passes: bool) -> RunResult:
    """What the cuda path hands over: a kernel and a baseline, each timed and judged."""
    measured = Measured(
        job=spec("matmul").model_copy(update={"path": PathId.CUDA}),
        params=SMALL["matmul"],
        environment=_environment(),
        started=time.perf_counter(),
        measurements=[
            _measurement("kernel", BoundaryId.DEVICE_EVENTS, [2e-5, 3e-5, 2.5e-5]),
            _measurement("kernel", BoundaryId.HOST_SYNC, [4e-5, 5e-5, 4.5e-5]),
            _measurement("cuBLAS", BoundaryId.DEVICE_EVENTS, [1e-5, 1.2e-5, 1.1e-5]),
        ],
        work=Work(1e6, 1e4),
        rate_basis=RateBasis(BoundaryId.DEVICE_EVENTS, "kernel"),
        comparison=True,
    )
    verdict: Callable[[bool], Correctness] = lambda ok: Correctness(  # noqa: E731
        passed=ok, error=0.0 if ok else 0.5, tolerance=1e-3, detail=None if ok else "wrong"
    )
    return measured.check(verdict(kernel_passes), {"cuBLAS": verdict(cublas_passes)}).publish()


def test_the_cuda_path_shape_kernel_failing_hides_every_subject() -> None:
    good = _cuda_like(True, True)
    # The counts are the catalog's (2mnk), never the runner's `Work`: the rate is theirs.
    assert good.rates is not None and good.rates.flops == 2 * 48 * 40 * 32
    assert good.rates.flops_per_s == pytest.approx(good.rates.flops / 2.5e-5)
    assert len(good.extra["comparison"]) == 3
    bad = _cuda_like(False, True)
    assert not bad.valid and found(bad) == []


def test_a_failed_baseline_loses_its_own_times_only() -> None:
    run = _cuda_like(True, False)
    assert run.valid
    cublas = [m for m in run.measurements if m.subject == "cuBLAS"]
    assert cublas and all(m.stats is None and m.samples_s == [] for m in cublas)
    assert all(m.stats is not None for m in run.measurements if m.subject == "kernel")
    assert {row["subject"] for row in run.extra["comparison"]} == {"kernel"}


def test_a_scaling_point_that_failed_its_check_loses_its_times() -> None:
    point = ScalingPoint(
        devices=1,
        mode="strong",
        mesh_shape=[1],
        samples_s=[1e-3, 2e-3],
        median_s=1.5e-3,
        error=1e-7,
    )
    scaled = [StageId.COMPILE, StageId.EXECUTE, StageId.SCALE]  # a series needs the stage
    measured = Measured(
        job=spec("sharded-matmul").model_copy(update={"stages": scaled}),
        params=SMALL["sharded-matmul"],
        environment=_environment(),
        started=time.perf_counter(),
        scaling=ScalingSeries(
            label="test",
            points=[
                point.model_copy(update={"correct": True}),
                point.model_copy(update={"devices": 2, "correct": False, "note": "wrong"}),
            ],
        ),
    )
    passed = Correctness(passed=True, error=1e-7, tolerance=1e-5)
    run = measured.check(passed).publish()
    assert run.valid and run.scaling is not None
    kept, withheld = run.scaling.points
    assert kept.median_s == 1.5e-3 and kept.samples_s
    assert withheld.median_s is None and withheld.samples_s == []
    assert withheld.note == "withheld: wrong"


def test_a_group_that_disagrees_publishes_no_speed() -> None:
    run = run_job(spec("sharded-matmul"))
    assert run.valid and found(run)
    members = [
        GroupProcess(process_id=0, local_devices=1, passed=True, median_s=1e-3, digest="a"),
        GroupProcess(process_id=1, local_devices=1, passed=True, median_s=1e-3, digest="b"),
    ]
    report = GroupReport(
        processes=2, coordinator="127.0.0.1:1", devices=2, members=members, agreed=False
    )
    regrouped = regroup(run, report)
    assert not regrouped.valid and found(regrouped) == []
    assert regrouped.group is not None and regrouped.group.members[1].median_s is None
    claimed = regroup(run, report.model_copy(update={"agreed": True}))
    assert not claimed.valid  # the report's own `agreed` is not taken on trust
    same = [m.model_copy(update={"digest": "a"}) for m in members]
    agreed = regroup(run, report.model_copy(update={"members": same}))
    assert agreed.valid and agreed.group is not None and agreed.group.members[0].median_s
    assert agreed.group.agreed


def test_a_compile_only_group_is_valid_when_every_process_compiled() -> None:
    """The finding: a compile-only sharded-matmul in a two-process group came back
    `valid: false`, "process 0: failed", because agreement asked every process for a
    passed check and an output digest, which nothing that only compiles has."""
    job = JobSpec.model_validate(
        {"workload": "sharded-matmul", "params": SMALL["sharded-matmul"], "stages": ["compile"]}
    )
    run = run_job(job)
    assert run.valid and run.correctness is None
    compiled = [GroupProcess(process_id=i, local_devices=1) for i in (0, 1)]
    report = GroupReport(processes=2, coordinator="127.0.0.1:1", devices=2, members=compiled,
                         agreed=False)  # fmt: skip
    grouped = regroup(run, report)
    assert grouped.valid and grouped.group is not None and grouped.group.agreed
    assert not any("did not all compute" in w for w in grouped.warnings)
    broke = [compiled[0], compiled[1].model_copy(update={"message": "compile failed: OOM"})]
    failed = regroup(run, report.model_copy(update={"members": broke}))
    assert not failed.valid
    assert any("process 1: compile failed: OOM" in w for w in failed.warnings)


def test_a_time_capped_run_says_so_in_a_field_not_in_its_warnings() -> None:
    """The finding: the harness wrote "sampling reached the time cap of X s after N of M"
    into the warnings, from which a speed follows (X / N) past any field-based strip."""
    job = JobSpec.model_validate(
        {
            "workload": "matmul",
            "params": SMALL["matmul"],
            "measure": {"samples": 5000, "max_seconds": 0.05},
        }
    )
    run = run_job(job)
    (m,) = run.measurements
    assert m.stopped_because is not None and "time cap" in m.stopped_because
    assert not any("time cap" in w or "IQR/median" in w for w in run.warnings), run.warnings
    with perturbed(0.5):
        failed = run_job(job)
    assert not failed.valid and failed.measurements[0].stopped_because is None
    assert not any("time cap" in w for w in failed.warnings)
