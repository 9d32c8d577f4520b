"""The catalog's formulas: every workload's FLOPs, bytes and tolerance, computed without jax.

The server recomputes these from a job's parameters, so they must be the very figures a
worker's run counts. The recorded values below are what the jax-side workloads returned
before the formulas moved into the catalog; the hand-computed ones are worked out here,
term by term, from the workload's definition.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from workers.catalog import WORKLOADS, parse_params
from workers.catalog.exported import ExportedParams
from workers.catalog.shape_sweep import ShapeSweepParams

U32 = 2.0**-24
"""float32's unit roundoff."""

BIG = 10**15
"""A byte cap no parameter set here reaches: these tests only count."""

HAND: list[tuple[str, dict[str, Any], float, float, float]] = [
    # C[2, 3] = A[2, 4] @ B[4, 3]: a multiply and an add per term; A, B and C in float32.
    ("matmul", {"m": 2, "n": 3, "k": 4}, 2 * 2 * 3 * 4, 4 * (2 * 4 + 4 * 3 + 2 * 3), 1e-2),
    # Full float32 over k = 16384 terms: 4 roundoffs per √term, √16384 = 128.
    (
        "matmul",
        {"m": 1, "n": 1, "k": 16384, "precision": "highest"},
        2 * 16384,
        4 * (16384 + 16384 + 1),
        2**-15,
    ),
    ("matmul", {"m": 3, "n": 3, "k": 3, "dtype": "bfloat16"}, 54, 2 * 27, 2e-2),
    # sin, then affine (a multiply-add, two): three per element; one vector in, one out.
    ("elementwise", {"n": 10, "ops": 2}, 3 * 10, 2 * 10 * 4, 2 * 1e-6 * (1 + math.sqrt(2))),
    ("elementwise", {"n": 4, "ops": 4, "dtype": "float16"}, 5 * 4, 2 * 4 * 2, 2 * 2**-11 * 3),
    # A row sum of a 3 × 5 matrix: 15 adds; 15 elements read, 3 written.
    ("reduction", {"rows": 3, "cols": 5}, 15, 4 * 18, 1e-6 + 4 * U32 * math.sqrt(5)),
    # A softmax down the columns: five operations per element; all 15 written back.
    (
        "reduction",
        {"rows": 3, "cols": 5, "axis": 0, "op": "softmax", "dtype": "bfloat16"},
        5 * 15,
        2 * 30,
        1e-2 + 4 * U32 * math.sqrt(3),
    ),
    # Three rows of four float32 fetched and written, plus three int32 indices: exact.
    ("gather", {"rows": 10, "width": 4, "count": 3}, 0, 2 * 3 * 4 * 4 + 3 * 4, 0.0),
    # One head, S = 4, D = 2: two 2·S·S·D contractions and five per score.
    ("attention", {"batch": 1, "heads": 1, "seq_len": 4, "head_dim": 2}, 2 * 64 + 80, 128, 0.015),
    ("ffi", {"n": 3}, 2 * 3, 2 * 3 * 4, 8 * U32),
    ("sharded-matmul", {"m": 2, "n": 3, "k": 4, "devices": 1, "mesh": "1"}, 48, 104, 1e-2),
    # An all-reduce over 8 devices of 256 float32 each: 7 adds per element per device.
    ("collective", {"devices": 8, "bytes": 1024}, 7 * 256 * 8, 8 * 1024, 4 * U32 * 9),
    ("collective", {"devices": 4, "bytes": 64, "kind": "all-gather"}, 0, 4 * 64, 1e-12),
]

RECORDED: list[tuple[str, dict[str, Any], float, float, float]] = [
    ("matmul", {"m": 512, "n": 256, "k": 1024, "dtype": "bfloat16"}, 268435456.0, 1835008.0, 0.02),
    ("matmul", {"m": 7, "n": 9, "k": 16384, "precision": "highest"}, 2064384.0, 1048828.0, 2**-15),
    ("matmul", {"m": 1, "n": 1, "k": 1, "dtype": "float16", "precision": "high"}, 2.0, 6.0, 0.005),
    (
        "matmul",
        {"m": 64, "n": 64, "k": 14285, "precision": "highest"},
        117022720.0,
        7330304.0,
        2.849575825323205e-05,
    ),
    ("elementwise", {"n": 1000, "ops": 8}, 10000.0, 8000.0, 7.656854249492381e-06),
    ("elementwise", {"n": 3, "ops": 7, "dtype": "bfloat16"}, 27.0, 12.0, 0.028482432117692115),
    (
        "elementwise",
        {"n": 1 << 20, "ops": 64, "dtype": "float16"},
        83886080.0,
        4194304.0,
        0.0087890625,
    ),
    ("reduction", {"rows": 3, "cols": 5}, 15.0, 72.0, 1.5331201499700045e-06),
    (
        "reduction",
        {"rows": 1024, "cols": 65536, "dtype": "bfloat16"},
        67108864.0,
        134219776.0,
        0.01006103515625,
    ),
    (
        "reduction",
        {"rows": 100, "cols": 7, "op": "softmax", "dtype": "float16"},
        3500.0,
        2800.0,
        0.0020006307962682403,
    ),
    (
        "gather",
        {"rows": 65536, "width": 64, "count": 16384, "dtype": "bfloat16"},
        0.0,
        4259840.0,
        0.0,
    ),
    (
        "attention",
        {"batch": 2, "heads": 4, "seq_len": 256, "head_dim": 64, "causal": True},
        136839168.0,
        2097152.0,
        0.015,
    ),
    (
        "attention",
        {
            "batch": 1,
            "heads": 2,
            "seq_len": 8,
            "head_dim": 512,
            "dtype": "float16",
            "precision": "highest",
        },
        262784.0,
        65536.0,
        0.0075,
    ),
    (
        "attention",
        {"batch": 3, "heads": 1, "seq_len": 32768, "head_dim": 64, "precision": "highest"},
        840739848192.0,
        100663296.0,
        6.473755931273324e-05,
    ),
    (
        "ffi",
        {"n": 1 << 20, "scale": 3.0, "shift": -1.0},
        2097152.0,
        8388608.0,
        4.76837158203125e-07,
    ),
    (
        "sharded-matmul",
        {"m": 512, "n": 256, "k": 128, "dtype": "bfloat16"},
        33554432.0,
        458752.0,
        0.02,
    ),
    (
        "sharded-matmul",
        {"m": 16, "n": 32, "k": 4096, "precision": "highest", "sharding": "data"},
        4194304.0,
        788480.0,
        1.52587890625e-05,
    ),
    ("collective", {}, 14680064.0, 8388608.0, 2.1457672119140625e-06),
    (
        "collective",
        {"kind": "reduce-scatter", "bytes": 4096, "dtype": "bfloat16"},
        114688.0,
        32768.0,
        0.140625,
    ),
    (
        "collective",
        {"devices": 8, "mesh": "2x4", "over": "x", "bytes": 1024},
        2048.0,
        8192.0,
        7.152557373046875e-07,
    ),
    (
        "collective",
        {
            "devices": 8,
            "mesh": "2x4",
            "over": "y",
            "kind": "reduce-scatter",
            "bytes": 2048,
            "dtype": "float16",
        },
        24576.0,
        16384.0,
        0.009765625,
    ),
]


def _figures(workload: str, params: dict[str, Any]) -> tuple[Any, Any, Any]:
    parsed = parse_params(workload, params, max_bytes=BIG)
    return parsed.flop_count(), parsed.byte_count(), parsed.tolerance()


@pytest.mark.parametrize(("workload", "params", "flops", "moved", "tolerance"), HAND)
def test_the_catalog_counts_what_the_definition_says(
    workload: str, params: dict[str, Any], flops: float, moved: float, tolerance: float
) -> None:
    found = _figures(workload, params)
    assert found == (pytest.approx(flops), pytest.approx(moved), pytest.approx(tolerance))
    assert all(isinstance(x, float) for x in found)


@pytest.mark.parametrize(("workload", "params", "flops", "moved", "tolerance"), RECORDED)
def test_the_catalog_gives_the_figures_workers_always_counted(
    workload: str, params: dict[str, Any], flops: float, moved: float, tolerance: float
) -> None:
    assert _figures(workload, params) == (flops, moved, tolerance)  # to the last bit


def _sweep(**params: Any) -> ShapeSweepParams:
    parsed = parse_params("shape-sweep", params, max_bytes=BIG)
    assert isinstance(parsed, ShapeSweepParams)
    return parsed


def test_a_sweeps_counts_add_up_its_calls() -> None:
    # x[n, 256] @ w[256, 256]: 2·n·256·256 per call; x, w and the output in float32.
    sweep = _sweep(shapes=[3, 5, 8, 3, 5])
    assert sweep.flop_count_at(3) == 2 * 3 * 256 * 256
    assert sweep.byte_count_at(3) == 4 * (3 * 256 + 256 * 256 + 3 * 256)
    assert sweep.flop_count() == 2 * 24 * 256 * 256  # one pass, unpadded: 3+5+8+3+5 rows
    assert sweep.byte_count() == 1359872.0
    assert (sweep.pass_flops(), sweep.pass_bytes()) == (sweep.flop_count(), sweep.byte_count())
    assert sweep.tolerance() == 1e-2
    # pow2 runs the sizes at 4, 8, 8, 4, 8: 32 rows' work for 24 rows' worth.
    padded, flops, useful, waste = sweep.policy_figures("pow2")
    assert padded == [4, 8, 8, 4, 8]
    assert (flops, useful) == (2 * 32 * 256 * 256, 2 * 24 * 256 * 256)
    assert waste == pytest.approx(100 * 8 / 24)
    assert sweep.policy_figures("none") == ([3, 5, 8, 3, 5], useful, useful, 0.0)


def test_a_sweeps_elementwise_op_counts_as_the_elementwise_chain() -> None:
    sweep = _sweep(shapes=[3, 5, 8, 3, 5], op="elementwise", features=7, dtype="bfloat16")
    # Eight steps (sin, affine, tanh, cos, twice), the two affine ones counting two.
    assert sweep.flop_count_at(3) == 10 * 3 * 7
    assert sweep.byte_count_at(3) == 2 * 2 * 3 * 7
    assert sweep.tolerance() == 0.02990958691207961
    padded, flops, useful, waste = sweep.policy_figures("pow2")
    assert (padded, flops, useful) == ([4, 8, 8, 4, 8], 10 * 32 * 7, 10 * 24 * 7)
    assert waste == pytest.approx(100 * 8 / 24)


@pytest.mark.parametrize(
    ("params", "calls", "tolerance", "moved", "figures"),
    [
        (
            {},
            24,
            0.01,
            9338880.0,
            {"none": (1488, 195035136.0, 0.0), "pow2": (2236, 293076992.0, 50.26881720430107)},
        ),
        (
            {"bucketing": "multiple:8", "count": 40, "min_size": 2, "max_size": 900}
            | {"features": 33, "out_features": 5, "seed": 7},
            40,
            0.01,
            550192.0,
            {"none": (3446, 1137180.0, 0.0), "multiple:8": (3600, 1188000.0, 4.468949506674405)},
        ),
        (
            {"bucketing": "none", "shapes": [1, 2, 4]},
            3,
            0.01,
            800768.0,
            {"none": (7, 917504.0, 0.0)},
        ),
        (
            {"op": "elementwise", "bucketing": "multiple:3", "dtype": "float16"}
            | {"count": 17, "seed": 3},
            17,
            0.0037386983640099515,
            667648.0,
            {"none": (652, 1669120.0, 0.0), "multiple:3": (675, 1728000.0, 3.52760736196319)},
        ),
    ],
)
def test_a_sweeps_policy_figures_are_those_workers_always_reported(
    params: dict[str, Any],
    calls: int,
    tolerance: float,
    moved: float,
    figures: dict[str, tuple[int, float, float]],
) -> None:
    sweep = _sweep(**params)
    assert len(sweep.sizes()) == calls
    assert (sweep.tolerance(), sweep.byte_count()) == (tolerance, moved)
    assert sweep.policies() == list(figures)
    for policy, (rows, flops, waste) in figures.items():
        padded, executed, useful, wasted = sweep.policy_figures(policy)
        assert (sum(padded), executed, wasted) == (rows, flops, waste)
        assert useful == sweep.flop_count() == figures["none"][1]


def test_an_exported_function_has_no_formula_only_tolerances() -> None:
    bare = ExportedParams.model_validate({"artifact": "0" * 64})
    assert (bare.flop_count(), bare.byte_count(), bare.tolerance()) == (None, None, None)
    defaults = {"float64": 1e-12, "complex128": 1e-12, "float32": 1e-4, "complex64": 1e-4}
    defaults |= {"float16": 5e-3, "bfloat16": 2e-2, "int32": 0.0, "bool": 0.0}
    assert {d: bare.result_tolerance(d) for d in defaults} == defaults
    assert bare.loosest_tolerance() == 2e-2  # bfloat16's
    declared = ExportedParams.model_validate({"artifact": "0" * 64, "tolerance": 0.25})
    assert declared.tolerance() == 0.25
    assert {declared.result_tolerance(d) for d in defaults} == {0.25}
    assert declared.loosest_tolerance() == 0.25
    # The field is `tolerance` on the wire, both ways, whatever Python calls it.
    assert declared.model_dump(mode="json")["tolerance"] == 0.25
    assert "tolerance" in ExportedParams.model_json_schema()["properties"]


def test_every_catalog_workload_but_an_exported_one_has_all_three_figures() -> None:
    for name, cls in WORKLOADS.items():
        if name == "exported":
            continue
        params = cls.model_validate({})
        figures = params.flop_count(), params.byte_count(), params.tolerance()
        assert all(isinstance(x, float) and x >= 0 for x in figures), name


def test_the_jax_side_workloads_count_with_the_catalogs_formulas() -> None:
    from workers.workloads import WORKLOADS as JAX_SIDE
    from workers.workloads import shape_sweep

    for workload, params, *_ in HAND + RECORDED:
        parsed = parse_params(workload, params, max_bytes=BIG)
        side = JAX_SIDE[workload]
        found = side.flop_count(parsed), side.byte_count(parsed), side.tolerance(parsed)
        assert found == _figures(workload, params), workload
    sweep = _sweep(shapes=[3, 9])
    assert shape_sweep.flop_count(sweep, 9) == sweep.flop_count_at(9)
    assert shape_sweep.byte_count(sweep, 9) == sweep.byte_count_at(9)
    assert shape_sweep.tolerance(sweep) == sweep.tolerance()


def test_the_catalog_and_its_formulas_import_without_jax_or_numpy() -> None:
    code = (
        "import sys, pkgutil, importlib\n"
        "sys.modules['jax'] = None; sys.modules['numpy'] = None  # importing either fails\n"
        "import workers.catalog as catalog\n"
        "for info in pkgutil.iter_modules(catalog.__path__):\n"
        "    importlib.import_module(f'workers.catalog.{info.name}')\n"
        "for name, cls in catalog.WORKLOADS.items():\n"
        "    p = cls.model_validate({'artifact': '0' * 64} if name == 'exported' else {})\n"
        "    p.flop_count(), p.byte_count(), p.tolerance()\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
