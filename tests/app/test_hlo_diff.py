"""The HLO diff's matcher on small hand-written modules, one kind of change each (a
renaming, a split, a merge, a layout change, an added collective), and on large
generated ones: what it pairs, what it says differs, what it leaves on one side."""

from __future__ import annotations

import itertools
import time
from typing import Any

from app.ir.hlo_diff import STEPS, HloDiff, diff_modules
from app.pages.compare.hlo_changes import report_of
from tests.app.hlo_modules import BASE, GATHERED, RELAID, RENAMED, SPLIT, large, meta


def names(d: HloDiff) -> dict[str, Any]:
    """The diff by instruction names: pairs as "a=b", leftovers and regroups as names."""
    a, b = d.a.instrs, d.b.instrs
    return {
        "identical": [f"{a[p.a].name}={b[p.b].name}" for p in d.identical],
        "changed": {f"{a[p.a].name}={b[p.b].name}": p.what for p in d.changed},
        "only_a": [a[i].name for i in d.only_a],
        "only_b": [b[j].name for j in d.only_b],
        "splits": [([a[i].name for i in r.a], [b[j].name for j in r.b]) for r in d.splits],
        "merges": [([a[i].name for i in r.a], [b[j].name for j in r.b]) for r in d.merges],
    }


def test_a_module_against_itself_pairs_every_instruction_identically() -> None:
    found = names(diff_modules(GATHERED, GATHERED))
    assert found["changed"] == {} and found["only_a"] == found["only_b"] == []
    # The asynchronous pair is one instruction, named after its start.
    assert found["identical"] == [
        "x=x", "y=y", "fusion.3=fusion.3", "all-gather-start=all-gather-start",
        "slice.1=slice.1", "neg.1=neg.1",
    ]  # fmt: skip


def test_renamed_instructions_and_computations_are_identical() -> None:
    found = names(diff_modules(BASE, RENAMED))
    assert found["identical"] == ["x=x", "y=y", "fusion.3=fusion.9", "neg.1=negate.7"]
    assert found["changed"] == {} and found["only_a"] == found["only_b"] == []


def test_a_fusion_split_in_two_is_a_split_and_read_back_a_merge() -> None:
    split = names(diff_modules(BASE, SPLIT))
    assert split["splits"] == [(["fusion.3"], ["fusion.3", "fusion.4"])]
    assert split["identical"] == ["x=x", "y=y", "neg.1=neg.1"]  # it reads the split's result
    assert split["changed"] == {} and split["only_a"] == split["only_b"] == []
    merge = names(diff_modules(SPLIT, BASE))
    assert merge["merges"] == [(["fusion.3", "fusion.4"], ["fusion.3"])]
    assert merge["splits"] == [] and merge["only_a"] == merge["only_b"] == []


def test_a_layout_change_is_named_and_changes_nothing_else() -> None:
    found = names(diff_modules(BASE, RELAID))
    assert found["changed"] == {"neg.1=neg.1": ("layout",)}
    assert found["identical"] == ["x=x", "y=y", "fusion.3=fusion.3"]


def test_an_added_collective_is_only_in_b_with_its_bytes_and_groups() -> None:
    d = diff_modules(BASE, GATHERED)
    found = names(d)
    assert found["only_b"] == ["all-gather-start", "slice.1"]
    assert found["changed"] == {"neg.1=neg.1": ("operands",)}  # it reads the slice now
    (collective,) = d.collectives
    gather = d.b.instrs[collective.b or 0]
    assert (collective.a, collective.kind) == (None, "all-gather")
    assert gather.done == "all-gather-done" and gather.shape == "f32[32,128]{1,0}"
    assert gather.result_bytes == 32 * 128 * 4 and gather.groups == "[[0, 1, 2, 3]]"


ITERATED = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p: f32[512,512]) -> f32[512,512] {
  %p = f32[512,512]{1,0} parameter(0)
  ROOT %ar = f32[512,512]{1,0} all-reduce(%p), channel_id=3, replica_groups=GROUPS, \
to_apply=%add, backend_config={"estimated_cycles":"2620"}
}
"""


def test_replica_groups_compare_by_devices_not_spelling_and_cycles_are_read() -> None:
    mesh = ITERATED.replace("GROUPS", "mesh['axis_0'=1,'axis_1'=8] {'axis_1'}")
    iota = ITERATED.replace("GROUPS", "[1,8]<=[8]").replace("%ar", "%all-reduce.7")
    d = diff_modules(mesh, iota)
    assert names(d)["identical"] == ["p=p", "ar=all-reduce.7"]
    assert d.b.instrs[d.identical[1].b].cycles == 2620
    pairs = diff_modules(mesh, ITERATED.replace("GROUPS", "{{0,1,2,3},{4,5,6,7}}"))
    assert names(pairs)["changed"] == {"ar=ar": ("replica groups",)}


def test_metadata_pairs_a_kernel_that_became_another_kind() -> None:
    triton = BASE.replace(
        f"kind=kLoop, calls=%fused_add_mul, {meta('mul', 11)}",
        f"kind=kCustom, calls=%fused_add_mul, {meta('mul', 11)}, "
        'backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}',
    )
    library = BASE.replace(
        f"fusion(%x, %y), kind=kLoop, calls=%fused_add_mul, {meta('mul', 11)}",
        f'custom-call(%x, %y), custom_call_target="__cublas$gemm", {meta("mul", 11)}',
    )
    library = library[library.index("ENTRY") :]  # no fusion calls the body any more
    d = diff_modules(triton, library)
    (pair,) = d.changed
    assert (d.a.instrs[pair.a].kind, d.b.instrs[pair.b].kind) == (
        "kCustom/__triton_gemm",
        "__cublas$gemm",
    )
    assert (pair.step, pair.guess) == ("metadata", False)
    assert pair.what[:2] == ("opcode", "custom-call target")
    assert names(d)["identical"] == ["x=x", "y=y", "neg.1=neg.1"]


def test_every_pair_names_its_step_and_the_steps_stop_after_any() -> None:
    seen: list[set[str]] = []
    for k in range(1, len(STEPS) + 1):
        d = diff_modules(BASE, GATHERED, steps=STEPS[:k])
        steps = {p.step for p in [*d.identical, *d.changed]}
        assert steps <= {s.name for s in STEPS[:k]}, STEPS[k - 1].name
        seen.append({f"{p.a}={p.b}" for p in [*d.identical, *d.changed]})
    assert all(a <= b for a, b in itertools.pairwise(seen))  # each step only adds
    assert seen[0] and seen[0] != seen[-1]
    everything = diff_modules(BASE, GATHERED)
    assert {p.step for p in everything.identical} == {"exact"}
    assert [(p.step, p.guess) for p in everything.changed] == [("metadata", False)]


GEMMS = """HloModule m

%body (p0: f32[8,128], p1: f32[128,128]) -> f32[8,128] {
  %p0 = f32[8,128]{1,0} parameter(0)
  %p1 = f32[128,128]{1,0} parameter(1)
  ROOT %dot.1 = f32[8,128]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, META
}

ENTRY %main (x: f32[8,128], w: f32[128,128]) -> f32[8,128] {
  %x = f32[8,128]{1,0} parameter(0), PX
  %w = f32[128,128]{1,0} parameter(1), PW
  ROOT %gemm_fusion = f32[8,128]{1,0} fusion(%x, %w), kind=kCustom, calls=%body, META, \
backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
}
"""  # noqa: E501
REDUCED = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%body (p0: f32[8,128], p1: f32[128,128]) -> f32[8,128] {
  %p0 = f32[8,128]{1,0} parameter(0)
  %p1 = f32[128,128]{1,0} parameter(1)
  %z = f32[] constant(0)
  %m = f32[8,128,128]{2,1,0} broadcast(%p1), dimensions={1,2}, META
  ROOT %r = f32[8,128]{1,0} reduce(%m, %z), dimensions={1}, to_apply=%add, META
}

ENTRY %main (x: f32[8,128], w: f32[128,128]) -> f32[8,128] {
  %x = f32[8,128]{1,0} parameter(0), PX
  %w = f32[128,128]{1,0} parameter(1), PW
  ROOT %loop_reduce_fusion = f32[8,128]{1,0} fusion(%x, %w), kind=kLoop, calls=%body, META
}
"""


def _written(text: str) -> str:
    return (
        text.replace("META", meta("dot_general", 21))
        .replace("PX", meta("x", 1).replace("jit(f)/", ""))
        .replace("PW", meta("w", 1).replace("jit(f)/", ""))
    )


def test_a_reduction_never_pairs_with_a_gemm_and_another_size_is_a_guess() -> None:
    gemm, reduced = _written(GEMMS), _written(REDUCED)
    d = diff_modules(gemm, reduced)  # the same JAX operation, line and shape
    assert names(d)["only_a"] == ["gemm_fusion"] and names(d)["only_b"] == ["loop_reduce_fusion"]
    assert (d.a.instrs[d.only_a[0]].work, d.b.instrs[d.only_b[0]].work) == ("gemm", "reduction")
    library = gemm.replace(
        "ROOT %gemm_fusion = f32[8,128]{1,0} fusion(%x, %w), kind=kCustom, calls=%body",
        "ROOT %custom-call.1 = (f32[8,128]{1,0}, s8[1024]{0}) custom-call(%x, %w), "
        'custom_call_target="__cublas$lt$matmul"',
    ).replace(', \\\nbackend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}', "")
    split_k = gemm.replace(
        "ROOT %gemm_fusion = f32[8,128]{1,0}", "ROOT %gemm_fusion = f32[4,8,128]{2,1,0}"
    )
    same = diff_modules(gemm, library)
    (pair,) = same.changed  # a tuple with an array of the same size: no guess
    assert (pair.step, pair.guess) == ("metadata", False)
    other = diff_modules(split_k, library)
    (guessed,) = other.changed
    assert (guessed.step, guessed.guess) == ("metadata", True)
    report = report_of(other, "a", "b", {"a": "XLA:GPU", "b": "XLA:GPU"})
    (row,) = report["changed"]
    assert (row["label"], row["step"], row["guess"]) == (
        "model.py:21 dot_general",
        "metadata",
        True,
    )
    assert row["a"]["source"] == {"file": "/src/model.py", "line": 21, "place": "model.py:21"}
    assert report["summary"]["guesses"] == 1
    said = " ".join(report["sentences"])
    assert (
        "model.py:21: the matmul (dot_general) ran as a Triton fusion (gemm_fusion) in A and as "
        "a cuBLASLt call (custom-call.1) in B (a guess)" in said
    ), said


def test_a_cut_module_is_diffed_as_far_as_it_goes() -> None:
    cut = GATHERED[: GATHERED.index("  %slice.1") + 12]  # mid-line in the entry
    d = diff_modules(GATHERED, cut, cut_b=True)
    assert d.b.truncated and not d.a.truncated
    found = names(d)
    assert found["identical"] == [
        "x=x", "y=y", "fusion.3=fusion.3", "all-gather-start=all-gather-start"
    ]  # fmt: skip
    assert found["only_a"] == ["slice.1", "neg.1"] and found["only_b"] == []


def test_ten_thousand_instructions_pair_up_with_every_change_found() -> None:
    a, b = large(2000), large(2000, variant=True)
    started = time.perf_counter()
    d = diff_modules(a, b)
    took = time.perf_counter() - started
    assert len(d.a.units) >= 10_000 and len(d.b.units) >= 10_000
    assert len(d.splits) == 20 and not d.merges and not d.only_a
    assert sorted(d.b.instrs[j].op for j in d.only_b) == ["all-reduce"] * 4
    kinds = [p.what for p in d.changed]
    assert kinds.count(("layout",)) == 200  # every tenth copy
    assert kinds.count(("operands",)) == 4  # what reads an added all-reduce
    assert len(d.changed) == 204
    assert took < 20, f"{took:.1f} s (the benchmark holds the real bound: bench/hlo_diff.py)"
