"""The shape sweep: exact compilation counts per bucketing policy, padding waste in FLOPs,
steady-state passes, the correctness check, and the parameters' validation."""

from __future__ import annotations

from typing import Any

import pytest

from workers.catalog import CatalogError, parse_params
from workers.catalog.shape_sweep import ShapeSweepParams, bucket
from workers.measure.faults import perturbed
from workers.protocol import JobSpec, RunResult
from workers.run.engine import run_job

SHAPES = [3, 5, 8, 3, 5]


def sweep(params: dict[str, Any], **job: Any) -> RunResult:
    spec = {
        "workload": "shape-sweep",
        "params": {"features": 16, "out_features": 8, **params},
        "measure": {"samples": 3},
        **job,
    }
    return run_job(JobSpec.model_validate(spec))


@pytest.mark.parametrize(
    ("bucketing", "compilations", "padded"),
    [
        ("pow2", 2, [4, 8, 8, 4, 8]),
        ("multiple:8", 1, [8, 8, 8, 8, 8]),
        ("multiple:3", 3, [3, 6, 9, 3, 6]),
    ],
)
def test_compilations_are_counted_exactly(
    bucketing: str, compilations: int, padded: list[int]
) -> None:
    run = sweep({"shapes": SHAPES, "bucketing": bucketing})
    assert run.valid and run.sweep is not None
    none, bucketed = run.sweep.policies
    assert (none.policy, bucketed.policy) == ("none", bucketing)
    # Three distinct sizes without bucketing: three traces, three backend compilations.
    assert (none.compilations, none.traces) == (3, 3)
    assert (bucketed.compilations, bucketed.traces) == (compilations, compilations)
    assert none.padded_sizes == SHAPES and bucketed.padded_sizes == padded
    assert none.compile_s > 0 and bucketed.compile_s > 0
    assert none.padding_waste_pct == 0.0
    expected = (sum(padded) - sum(SHAPES)) / sum(SHAPES) * 100
    assert bucketed.padding_waste_pct == pytest.approx(expected)
    assert bucketed.flops == 2.0 * sum(padded) * 16 * 8
    assert bucketed.useful_flops == none.flops == 2.0 * sum(SHAPES) * 16 * 8


def test_steady_state_is_sampled_per_policy_and_checked() -> None:
    run = sweep({"shapes": SHAPES, "bucketing": "pow2", "op": "elementwise"})
    assert run.correctness is not None and run.correctness.passed
    assert [m.subject for m in run.measurements] == ["bucketing none", "bucketing pow2"]
    assert run.sweep is not None
    for m, policy in zip(run.measurements, run.sweep.policies, strict=True):
        assert m.boundary.value == "host-sync" and len(m.samples_s) == 3
        assert m.calls_per_sample == len(SHAPES) and m.stats is not None
        assert policy.steady_pass_s is not None and policy.steady_call_s is not None
        assert policy.steady_call_s == pytest.approx(policy.steady_pass_s / len(SHAPES))
    assert run.stage_seconds.compile == run.sweep.policies[0].compile_s
    assert run.artifacts.hlo is not None and "f32[8,16]" in run.artifacts.hlo


def test_without_bucketing_only_one_policy_runs() -> None:
    run = sweep({"shapes": [2, 2, 2, 7], "bucketing": "none"})
    assert run.sweep is not None and [p.policy for p in run.sweep.policies] == ["none"]
    assert run.sweep.policies[0].compilations == 2


def test_compile_only_counts_without_executing() -> None:
    run = sweep({"shapes": SHAPES, "bucketing": "pow2"}, stages=["compile"])
    assert run.sweep is not None and run.correctness is None and run.measurements == []
    assert [p.compilations for p in run.sweep.policies] == [3, 2]
    assert all(p.steady_pass_s is None for p in run.sweep.policies)


def test_a_wrong_output_hides_the_times() -> None:
    spec = JobSpec.model_validate(
        {"workload": "shape-sweep", "params": {"shapes": SHAPES}, "measure": {"samples": 2}}
    )
    with perturbed(0.5):
        run = run_job(spec)
    assert not run.valid and run.correctness is not None and not run.correctness.passed
    assert all(m.stats is None for m in run.measurements)
    assert run.rates is not None and run.rates.flops_per_s is None


def test_only_latency_mode_is_offered() -> None:
    with pytest.raises(CatalogError, match=r"measure\.mode: shape-sweep times host-synced"):
        sweep({"shapes": SHAPES}, measure={"samples": 2, "mode": "throughput"})


def test_buckets_and_sizes() -> None:
    assert [bucket(n, "pow2") for n in (1, 2, 3, 4, 5, 1000)] == [1, 2, 4, 4, 8, 1024]
    assert [bucket(n, "multiple:8") for n in (1, 8, 9)] == [8, 8, 16]
    assert bucket(7, "none") == 7
    drawn = {"count": 50, "min_size": 4, "max_size": 40, "seed": 3}
    sizes = ShapeSweepParams.model_validate(drawn).sizes()
    assert len(sizes) == 50 and min(sizes) >= 4 and max(sizes) <= 40
    assert sizes == ShapeSweepParams.model_validate(drawn).sizes()  # seeded: the same draw
    assert len(set(sizes)) > 10
    assert ShapeSweepParams.model_validate({"shapes": "3, 5,8"}).sizes() == [3, 5, 8]


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"bucketing": "pow3"}, "params.bucketing", "use none, pow2 or multiple:N"),
        ({"bucketing": "multiple:0"}, "params.bucketing", "use none, pow2 or multiple:N"),
        ({"shapes": "3,x"}, "params.shapes", "whole numbers separated by commas"),
        ({"shapes": [0, 4]}, "params.shapes.0", "greater than or equal to 1"),
        ({"shapes": [True]}, "params.shapes", "every size must be a whole number"),
        ({"min_size": 9, "max_size": 3}, "params.max_size", "at least min_size (9)"),
        ({"features": 5000}, "params.features", "less than or equal to 4096"),
        ({"shapes": list(range(1, 600))}, "params.shapes", "at most 512 sizes"),
    ],
)
def test_bad_parameters_name_their_field(params: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(CatalogError) as caught:
        parse_params("shape-sweep", params)
    assert caught.value.field == field
    assert message in str(caught.value)
