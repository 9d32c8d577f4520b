"""Collectives in HLO text: replica groups in every spelling, async forms, and the flow
analysis that says how each value lies across devices. Pure text, no jax."""

from __future__ import annotations

from workers.protocol.hlo_summary import parse_replica_groups, payload_shape, summarize_hlo
from workers.scale.hlo_flow import analyse

# The shape of a GPU program after SPMD partitioning: asynchronous collectives, a
# gathered operand, partial sums reduced, iota-style replica groups.
ASYNC_HLO = """\
HloModule jit_step, is_scheduled=true, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%gemm (p0: f32[64,16], p1: f32[16,32]) -> f32[64,32] {
  %p0 = f32[64,16]{1,0} parameter(0)
  %p1 = f32[16,32]{1,0} parameter(1)
  ROOT %d = f32[64,32]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (a: f32[16,16], b: f32[16,32]) -> f32[64,32] {
  %a = f32[16,16]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}, metadata={op_name="a"}
  %b = f32[16,32]{1,0} parameter(1), sharding={devices=[4,1]<=[4]}, metadata={op_name="b"}
  %ags = (f32[16,16]{1,0}, f32[64,16]{1,0}) all-gather-start(%a), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(step)/dot_general"}
  %agd = f32[64,16]{1,0} all-gather-done(%ags)
  %fusion = f32[64,32]{1,0} fusion(%agd, %b), kind=kCustom, calls=%gemm, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}, metadata={op_name="jit(step)/dot_general"}
  %ars = f32[64,32]{1,0} all-reduce-start(%fusion), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=%add
  ROOT %ard = f32[64,32]{1,0} all-reduce-done(%ars)
}
"""  # noqa: E501


def test_replica_groups_in_every_spelling() -> None:
    assert parse_replica_groups("{{0,1},{2,3}}") == [[0, 1], [2, 3]]
    assert parse_replica_groups("[1,4]<=[4]") == [[0, 1, 2, 3]]
    assert parse_replica_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_replica_groups("[2,4]<=[4,2]T(1,0)") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert parse_replica_groups("mesh['axis_0'=1,'axis_1'=8] {'axis_1'}") == [list(range(8))]
    assert parse_replica_groups("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}") == [
        [0, 4],
        [1, 5],
        [2, 6],
        [3, 7],
    ]
    assert parse_replica_groups("mesh['a'=2,'b'=2,'c'=2] {'a','c'}") == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert parse_replica_groups("{}") is None


def test_async_collectives_count_once_with_their_payload() -> None:
    assert payload_shape("all-gather-start", "(f32[16,16]{1,0}, f32[64,16]{1,0})") == (
        "f32[64,16]{1,0}"
    )
    assert payload_shape("all-reduce-start", "f32[64,32]{1,0}") == "f32[64,32]{1,0}"
    summary = summarize_hlo(ASYNC_HLO)
    gather, reduce = summary.collectives
    assert (gather.kind, gather.shape, gather.bytes) == ("all-gather", "f32[64,16]{1,0}", 4096)
    assert gather.asynchronous and gather.dimensions == [0] and gather.jax_op == "dot_general"
    assert gather.groups == [[0, 1, 2, 3]]
    assert (reduce.kind, reduce.bytes) == ("all-reduce", 64 * 32 * 4)
    assert reduce.groups == [[0, 2], [1, 3]]


def test_flow_marks_partitioned_gathered_and_partial_values() -> None:
    flow = analyse(ASYNC_HLO)
    assert flow.partitions == 4
    rows = {row.name: row for row in flow.intermediates()}
    assert rows["a"].placement == "partitioned" and rows["a"].detail == "input a"
    assert rows["ags"].placement == "gathered-and-redistributed"
    # The product of a gathered A and a row-sharded B is a partial sum on each device.
    assert rows["fusion"].placement == "partitioned"
    assert "partial sums" in (rows["fusion"].detail or "")
    assert rows["fusion"].op == "fusion kCustom (Triton): dot"
    assert rows["ars"].placement == "gathered-and-redistributed"
    assert "agd" not in rows and "ard" not in rows  # -done halves are not listed twice
    sources = [source for _, source in flow.collectives]
    assert sources == ["input a", "the result of dot_general (fusion)"]


def test_replicated_parameters_stay_replicated() -> None:
    text = """\
HloModule m, num_partitions=2

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0), sharding={replicated}
  ROOT %n = f32[4]{0} negate(%p)
}
"""
    rows = analyse(text, ["x"]).intermediates()
    assert [(r.name, r.placement, r.detail) for r in rows] == [
        ("p", "replicated", "input x"),
        ("n", "replicated", None),
    ]


def test_a_fusion_calling_several_computations_lists_all_their_ops() -> None:
    # `calls={%a, %b}`: both readers of HLO share one pattern, so both read the list.
    text = """\
HloModule m, num_partitions=1

%first (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%x)
}

%second (y: f32[4]) -> f32[4] {
  %y = f32[4]{0} parameter(0)
  ROOT %t = f32[4]{0} tanh(%y)
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(%p), kind=kLoop, calls={%first, %second}
}
"""
    rows = analyse(text).intermediates()
    assert rows[-1].op == "fusion kLoop: exponential, tanh"
