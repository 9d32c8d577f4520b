"""Every workload runs through all four stages, passes its check and leaves its IR."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.workers.conftest import SMALL
from workers.catalog import WORKLOADS as CATALOG
from workers.catalog import parse_params
from workers.protocol import JobSpec
from workers.run.engine import run_job
from workers.workloads import WORKLOADS


@pytest.mark.parametrize("workload", sorted(SMALL))
def test_workload_is_correct_and_leaves_artifacts(
    workload: str, job: Callable[..., JobSpec]
) -> None:
    run = run_job(job(workload))
    assert run.valid
    assert run.correctness is not None and run.correctness.passed
    assert run.correctness.error is not None
    assert run.correctness.error <= run.correctness.tolerance
    assert run.artifacts.jaxpr is not None and "lambda" in run.artifacts.jaxpr
    assert run.artifacts.stablehlo is not None and "stablehlo." in run.artifacts.stablehlo
    assert run.artifacts.hlo is not None and "HloModule" in run.artifacts.hlo
    assert run.artifacts.ptx is None and run.artifacts.sass is None
    assert run.hlo_summary is not None and run.hlo_summary.instructions > 0
    stages = run.stage_seconds
    for seconds in (stages.trace, stages.lower, stages.compile, stages.warm_up):
        assert seconds is not None and seconds > 0
    assert run.cost_analysis is not None
    assert run.memory_analysis is not None and run.memory_analysis.argument_bytes
    assert run.rates is not None and run.rates.bytes > 0
    assert run.rates.bytes_per_s is not None and run.rates.bytes_per_s > 0
    assert [i.name for i in run.inputs] == [
        s.name for s in WORKLOADS[workload].input_specs(parse_params(workload, run.params))
    ]


@pytest.mark.parametrize(
    ("workload", "params"),
    [
        ("matmul", {"dtype": "bfloat16"}),
        ("matmul", {"dtype": "float16", "precision": "highest"}),
        ("matmul", {"precision": "high"}),
        ("elementwise", {"dtype": "bfloat16", "ops": 64}),
        ("reduction", {"op": "softmax", "axis": 0, "dtype": "float16"}),
        ("gather", {"dtype": "bfloat16"}),
        ("attention", {"causal": True, "dtype": "bfloat16"}),
    ],
)
def test_dtypes_and_options_pass_their_declared_tolerance(
    workload: str, params: dict[str, object], job: Callable[..., JobSpec]
) -> None:
    run = run_job(job(workload, params, samples=1))
    assert run.correctness is not None and run.correctness.passed, run.correctness


def test_inputs_are_seeded_and_never_zero() -> None:
    for name, workload in WORKLOADS.items():
        if getattr(CATALOG[name], "file_fields", None):
            continue  # an uploaded function's inputs: tests/workers/test_export_fn.py
        params = parse_params(name, SMALL[name])
        first = workload.make_inputs(params, np.random.default_rng(0))
        again = workload.make_inputs(params, np.random.default_rng(0))
        for a, b in zip(first, again, strict=True):
            np.testing.assert_array_equal(a, b)
            assert np.count_nonzero(a) > 0.9 * a.size, name


def test_elementwise_chain_fuses_into_one_kernel(job: Callable[..., JobSpec]) -> None:
    run = run_job(job("elementwise", {"ops": 16}, samples=1))
    assert run.hlo_summary is not None
    (fusion,) = run.hlo_summary.fusions
    assert {"sine", "tanh", "cosine"} <= set(fusion.ops)


def test_matmul_precision_reaches_the_jaxpr(job: Callable[..., JobSpec]) -> None:
    run = run_job(job("matmul", {"precision": "highest"}, samples=1), None)
    assert run.artifacts.jaxpr is not None and "HIGHEST" in run.artifacts.jaxpr


def test_work_counts_are_analytic() -> None:
    matmul = WORKLOADS["matmul"]
    params = parse_params("matmul", {"m": 2, "n": 3, "k": 5, "dtype": "bfloat16"})
    assert matmul.flop_count(params) == 2 * 2 * 3 * 5
    assert matmul.byte_count(params) == 2 * (2 * 5 + 5 * 3 + 2 * 3)
    assert matmul.tolerance(params) == pytest.approx(2e-2)
