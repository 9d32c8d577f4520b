"""The catalog: jax-free, strict, bounded, and listed with JSON Schemas."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workers.catalog import WORKLOADS, CatalogError, catalog_listing, parse_params
from workers.cli.run import parse_assignments, parse_value


def test_catalog_imports_without_jax_or_numpy() -> None:
    code = (
        "import sys, workers.catalog, workers.protocol;"
        "workers.catalog.catalog_listing();"
        "assert 'jax' not in sys.modules and 'numpy' not in sys.modules, sys.modules.keys()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_listing_names_every_workload_with_a_schema() -> None:
    listing = {entry["id"]: entry for entry in catalog_listing()}
    assert {"matmul", "elementwise", "reduction", "gather", "attention", "ffi"} <= set(listing)
    for entry in listing.values():
        schema = entry["params_schema"]
        assert schema["type"] == "object"
        assert schema["properties"], entry["id"]
        assert "jax-cpu" in entry["paths"]
    assert listing["attention"]["params_schema"]["properties"]["causal"]["type"] == "boolean"
    assert listing["matmul"]["params_schema"]["properties"]["m"]["maximum"] == 16384


@pytest.mark.parametrize(
    ("workload", "params", "field", "words"),
    [
        ("matmul", {"m": 0}, "params.m", ["1 ≤ m ≤ 16384"]),
        ("matmul", {"m": 20000}, "params.m", ["1 ≤ m ≤ 16384"]),
        ("matmul", {"dtype": "float64"}, "params.dtype", ["float32", "bfloat16", "float16"]),
        ("matmul", {"precision": "max"}, "params.precision", ["highest"]),
        ("elementwise", {"ops": 65}, "params.ops", ["1 ≤ ops ≤ 64"]),
        ("reduction", {"axis": 2}, "params.axis", ["0 ≤ axis ≤ 1"]),
        ("reduction", {"op": "mean"}, "params.op", ["sum", "softmax"]),
        ("gather", {"width": 5000}, "params.width", ["width ≤ 4096"]),
        ("attention", {"head_dim": 0}, "params.head_dim", ["1 ≤ head_dim"]),
        ("attention", {"causal": "yes"}, "params.causal", ["bool"]),
    ],
)
def test_out_of_range_parameters_are_rejected_by_name(
    workload: str, params: dict[str, object], field: str, words: list[str]
) -> None:
    with pytest.raises(CatalogError) as caught:
        parse_params(workload, params)
    assert caught.value.field == field
    message = str(caught.value)
    assert message.startswith(f"{field}:")
    for word in words:
        assert word in message


def test_unknown_fields_and_coercion_are_refused() -> None:
    with pytest.raises(CatalogError, match=r"params\.mm: unknown field \(known: m, n, k"):
        parse_params("matmul", {"mm": 3})
    with pytest.raises(CatalogError, match=r"params\.m"):
        parse_params("matmul", {"m": "512"})  # strings are not integers here
    with pytest.raises(CatalogError, match=r"params\.m"):
        parse_params("matmul", {"m": True})
    with pytest.raises(CatalogError, match="unknown workload"):
        parse_params("conv", {})


def test_total_bytes_are_capped_by_the_setting() -> None:
    with pytest.raises(CatalogError, match=r"over this server's limit of 1 kB \(1,000 bytes\)"):
        parse_params("matmul", {"m": 64, "n": 64, "k": 64}, max_bytes=1000)
    big = parse_params("attention", {"seq_len": 8192, "batch": 4, "heads": 8}, 10**12)
    assert big.input_bytes() > 8192 * 8192 * 4 * 8 * 4  # the score matrix counts


def test_every_default_is_valid_and_small() -> None:
    for name, cls in WORKLOADS.items():
        if getattr(cls, "file_fields", None):  # names uploaded files: there is no default
            continue
        params = cls()
        assert params.input_bytes() < 64 * 1024**2, name


def test_command_line_values_become_typed_values() -> None:
    assert parse_assignments(["m=512", "causal=true", "x=1.5", "dtype=bfloat16"]) == {
        "m": 512,
        "causal": True,
        "x": 1.5,
        "dtype": "bfloat16",
    }
    assert parse_value("False") is False
    assert parse_value("-3") == -3
    assert parse_value("nan") == "nan"  # left as text for validation to refuse
