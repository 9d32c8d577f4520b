"""The scale workloads' parameters: meshes, specs and sizes checked before any jax runs."""

from __future__ import annotations

from typing import Any

import pytest

from workers.catalog import CatalogError, catalog_listing, parse_params
from workers.catalog.collective import CollectiveParams
from workers.catalog.mesh import MeshError, SeriesMode, series_counts, sub_mesh
from workers.catalog.sharded_matmul import ShardedMatmulParams
from workers.protocol import StageId


def params(workload: str, **given: Any) -> Any:
    return parse_params(workload, given)


def refused(workload: str, **given: Any) -> CatalogError:
    with pytest.raises(CatalogError) as caught:
        parse_params(workload, given)
    return caught.value


def test_defaults_span_eight_devices_and_divide_evenly() -> None:
    p = params("sharded-matmul")
    assert p.devices() == 8 and p.mesh_shape() == (8,) and p.axis_names() == ("x",)
    assert p.m % 8 == p.n % 8 == p.k % 8 == 0
    c = params("collective")
    assert c.devices() == 8 and c.elements() % 8 == 0
    # `devices` is the wire name, in both directions.
    assert p.model_dump()["devices"] == 8 and "devices_" not in p.model_dump()
    listing = {w["id"]: w for w in catalog_listing()}
    assert "devices" in listing["sharded-matmul"]["params_schema"]["properties"]
    assert StageId.SCALE.value in listing["collective"]["stages"]


def test_presets_set_the_specs_the_issue_names() -> None:
    data = params("sharded-matmul", sharding="data")
    tensor = params("sharded-matmul", sharding="tensor")
    gathered = params("sharded-matmul", sharding="gathered")
    x = ("x",)
    assert data.specs() == ((x, ()), ((), ()), (x, ()))
    assert tensor.specs() == (((), x), (x, ()), ((), ()))
    assert gathered.specs() == ((x, ()), ((), x), ((), ()))
    two = params("sharded-matmul", mesh="2x4", axes="data,model", sharding="data")
    assert two.specs()[0] == (("data", "model"), ())


def test_custom_specs_are_parsed_and_checked() -> None:
    p = params(
        "sharded-matmul",
        devices=8,
        mesh="2x4",
        axes="a,b",
        sharding="custom",
        a_spec="a,b",
        b_spec="b,-",
        out_spec="a,-",
    )
    assert p.specs() == ((("a",), ("b",)), (("b",), ()), (("a",), ()))
    err = refused("sharded-matmul", sharding="custom", a_spec="x,-", b_spec="-,q", out_spec="-,-")
    assert err.field == "params.b_spec" and "unknown mesh axis 'q'" in str(err)
    err = refused("sharded-matmul", sharding="custom", a_spec="x,x", b_spec="-,-", out_spec="-,-")
    assert err.field == "params.a_spec" and "two dimensions" in str(err)
    err = refused("sharded-matmul", sharding="custom", a_spec="x", b_spec="-,-", out_spec="-,-")
    assert err.field == "params.a_spec" and "2 dimensions" in str(err)
    err = refused("sharded-matmul", sharding="custom")
    assert err.field == "params.a_spec"
    err = refused("sharded-matmul", sharding="tensor", out_spec="x,-")
    assert err.field == "params.out_spec" and "only read when sharding=custom" in str(err)


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        ({"mesh": "2x3"}, "params.mesh", "make 6 devices, but devices=8"),
        ({"mesh": "2y4"}, "params.mesh", "write axis sizes"),
        ({"mesh": "2x4", "axes": "x"}, "params.axes", "1 axis name(s) for a mesh of 2 axes"),
        ({"mesh": "2x4", "axes": "x,x"}, "params.axes", "once"),
        ({"sharding": "data", "m": 100}, "params.m", "m=100 of a does not divide evenly"),
        ({"sharding": "tensor", "k": 12}, "params.k", "k=12"),
        ({"sharding": "gathered", "n": 20}, "params.n", "n=20 of b"),
        ({"devices": 0}, "params.devices", "greater than or equal to 1"),
    ],
)
def test_a_bad_mesh_spec_names_its_field(given: dict[str, Any], field: str, words: str) -> None:
    err = refused("sharded-matmul", **given)
    assert err.field == field
    assert words in str(err)
    # A divisibility error is not a range error: no misleading "allowed: 1 ≤ m ≤ …".
    if field in {"params.m", "params.k", "params.n"}:
        assert "allowed" not in str(err)


def test_a_size_that_is_not_sharded_need_not_divide() -> None:
    # Data parallelism shards m only: k and n may be anything.
    p = params("sharded-matmul", sharding="data", k=13, n=7)
    assert p.arrays()[0].shape == (512, 13)


def test_collective_bytes_and_axes_are_checked() -> None:
    assert refused("collective", bytes=6).field == "params.bytes"
    err = refused("collective", kind="reduce-scatter", bytes=12)
    assert err.field == "params.bytes" and "reduce-scatter over 8 devices" in str(err)
    err = refused("collective", mesh="2x4", over="z")
    assert err.field == "params.over" and "unknown mesh axis 'z'" in str(err)
    c = params("collective", mesh="2x4", over="y", kind="all-gather", bytes=64)
    assert c.over_axes() == ("y",) and c.rest_axes() == ("x",) and c.group_size() == 4
    x, out = c.arrays()
    assert x.shape == (8 * 16,) and x.spec == (("x", "y"),)
    assert out.shape == (8 * 16,) and out.spec == (("x",),)
    rs = params("collective", mesh="2x4", over="y", kind="reduce-scatter", bytes=64)
    assert rs.arrays()[1].shape == (2 * 16,) and rs.arrays()[1].spec == (("x", "y"),)


def test_a_mesh_given_as_a_number_reads_as_one_axis() -> None:
    # `boundary run ... mesh=8` parses 8 as an integer.
    assert params("collective", mesh=8).mesh_shape() == (8,)


def test_series_counts_and_sub_meshes() -> None:
    assert series_counts(8) == [1, 2, 4, 8]
    assert series_counts(6) == [1, 2, 4, 6]
    assert series_counts(1) == [1]
    assert sub_mesh((2, 4), 4) == (1, 4)
    assert sub_mesh((2, 4), 2) == (1, 2)
    assert sub_mesh((2, 4), 8) == (2, 4)
    assert sub_mesh((2, 3), 4) is None


def test_strong_keeps_global_sizes_and_weak_keeps_shards() -> None:
    p = ShardedMatmulParams.model_validate({"sharding": "data", "m": 64})
    strong = p.scaled(2, SeriesMode.STRONG)
    weak = p.scaled(2, SeriesMode.WEAK)
    assert (strong.devices(), strong.m) == (2, 64)
    assert (weak.devices(), weak.m) == (2, 16)  # 64 / 8 rows each, on 2 devices
    t = ShardedMatmulParams.model_validate({"sharding": "tensor", "k": 64, "mesh": "2x4"})
    assert t.scaled(4, SeriesMode.WEAK).k == 32 and t.scaled(4, SeriesMode.WEAK).mesh == "1x4"
    c = CollectiveParams.model_validate({"bytes": 1024})
    assert c.scaled(2, SeriesMode.STRONG).bytes == 4096  # the global payload is kept
    assert c.scaled(2, SeriesMode.WEAK).bytes == 1024  # each device's buffer is kept
    with pytest.raises(MeshError):
        ShardedMatmulParams.model_validate({"devices": 6, "mesh": "2x3", "k": 48}).scaled(
            4, SeriesMode.STRONG
        )


def test_input_bytes_count_every_devices_copy() -> None:
    # Replicated B is held whole by each of the 8 devices; A and C are split 8 ways.
    p = params("sharded-matmul", sharding="data", m=64, n=32, k=16)
    per_device = (8 * 16 + 16 * 32 + 8 * 32) * 4
    assert p.input_bytes() == per_device * 8
