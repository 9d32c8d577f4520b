"""Shardings an artifact's header keeps from a jax older than named shardings: XLA's HLO
sharding protobuf, read without jax (workers.export.hlo_sharding) and printed as XLA
prints it, then said in words like a named sharding. The newer named shardings are read
from a real 8-device export in tests/app/test_upload_shardings.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jax._src.export import serialization
from jax._src.lib import xla_client

from workers.export.header import read_header
from workers.export.hlo_sharding import read_op_sharding

XLA_TEXTS = [
    "{replicated}",
    "{maximal device=3}",
    "{manual}",
    "{devices=[2,4]<=[8]}",
    "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
    "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
    "{devices=[2,2]0,2,1,3}",
    "{devices=[2,1,2]<=[4] last_tile_dims={manual}}",
]


def proto(text: str) -> bytes:
    data: bytes = xla_client.HloSharding.from_string(text).to_proto().SerializeToString()
    return data


@pytest.mark.parametrize("text", XLA_TEXTS)
def test_an_hlo_sharding_reads_as_xla_prints_it(text: str) -> None:
    assert read_op_sharding(proto(text)).text() == text


def older_header(monkeypatch: pytest.MonkeyPatch, shardings: list[str]) -> bytes:
    """A real artifact serialized the way a jax before named shardings did: a Sharding
    table per argument and result holding an HLO sharding protobuf, and no indices."""
    from tests.app.test_artifacts import forward
    from workers.cli.export_fn import export_function

    _, exported = export_function(forward, [("float32", (8, 16)), ("float32", (16, 4))], ["cpu"])
    texts: Iterator[str] = iter(shardings)

    def hlo_table(builder: Any, sharding: Any, *, uniques: Any) -> int:
        data = builder.CreateByteVector(proto(next(texts)))
        serialization.ser_flatbuf.ShardingStart(builder)
        serialization.ser_flatbuf.ShardingAddHloShardingProto(builder, data)
        return int(serialization.ser_flatbuf.ShardingEnd(builder))

    monkeypatch.setattr(serialization, "_serialize_sharding", hlo_table)
    for name in ("ExportedAddInShardingsIdxs", "ExportedAddOutShardingsIdxs"):
        monkeypatch.setattr(serialization.ser_flatbuf, name, lambda builder, idxs: None)
    return bytes(exported.serialize())


def test_an_older_header_shows_each_hlo_sharding_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    data = older_header(
        monkeypatch,
        [
            "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
            "{replicated}",
            "{devices=[8,1]<=[8]}",
        ],
    )
    header = read_header(data).as_dict()
    x, w = header["in_shardings"]  # type: ignore[misc]
    assert x["hlo_sharding"] == "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"
    assert x["words"] == "dim 0 split 2 ways; each piece on 4 devices; float32[4,16] on each device"
    assert x["specified"] and x["mesh"] is None and x["spec_text"] is None
    assert w["words"] == "replicated: all of it on each device"
    (out,) = header["out_shardings"]  # type: ignore[misc]
    assert out["words"] == "dim 0 split 8 ways; float32[1,4] on each device"
    assert header["meshes"] == []
