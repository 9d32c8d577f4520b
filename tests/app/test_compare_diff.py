"""The IR diff: what differs stays on screen, what only points at Python source does not."""

from __future__ import annotations

from app.ir.diff import MAX_LINES, ir_diff, normalize

HLO = """HloModule jit_matmul

FileNames
1 "{path}"

StackFrames
1 {{file_location_id=1 parent_frame_id=1}}

ENTRY %main.1 (a.1: f32[64,64], b.1: f32[64,64]) -> f32[64,64] {{
  %a.1 = f32[64,64]{{1,0}} parameter(0), metadata={{op_name="a"}}
  %b.1 = f32[64,64]{{1,0}} parameter(1), metadata={{op_name="b"}}
  ROOT %dot = f32[64,64]{{1,0}} {op}(%a.1, %b.1), metadata={{op_name="dot" stack_frame_id={frame}}}
}}
"""


def test_source_locations_are_not_differences() -> None:
    a = HLO.format(path="/home/a/run.py", op="dot", frame=3)
    b = HLO.format(path="/srv/b/engine.py", op="dot", frame=7)
    assert "FileNames" not in normalize(a) and "metadata" not in normalize(a)
    found = ir_diff("hlo", a, b)
    assert found.identical and (found.added, found.removed) == (0, 0)
    raw = ir_diff("hlo", a, b, strip_metadata=False)
    assert not raw.identical


def test_a_changed_instruction_is_shown_beside_its_counterpart() -> None:
    a = HLO.format(path="x", op="dot", frame=1)
    b = HLO.format(path="x", op="custom-call", frame=1)
    found = ir_diff("hlo", a, b)
    (changed,) = [r for r in found.rows if r.kind == "replace"]
    assert "dot(%a.1" in changed.left and "custom-call(%a.1" in changed.right
    assert changed.left_no == changed.right_no
    assert (found.added, found.removed, found.changed) == (1, 1, 1)


def test_long_unchanged_stretches_fold_and_huge_texts_are_cut() -> None:
    body = [f"  %x{i} = f32[8]{{0}} add(%p, %p)" for i in range(200)]
    a = "\n".join(["HloModule m", *body, "  ROOT %r = f32[8] copy(%x0)"])
    b = "\n".join(["HloModule m", *body, "  ROOT %r = f32[8] negate(%x0)"])
    found = ir_diff("hlo", a, b)
    folds = [r for r in found.rows if r.kind == "fold"]
    assert len(folds) == 1 and "unchanged lines" in folds[0].left
    assert len(found.rows) < 10
    huge = "\n".join(f"line {i}" for i in range(MAX_LINES + 50))
    assert any("only the first" in n for n in ir_diff("ptx", huge, huge).notes)


def test_source_notes_of_stablehlo_and_jaxpr_are_dropped_before_diffing() -> None:
    a = (
        '%0 = stablehlo.tanh %arg0 : tensor<8xf32> loc(#loc3)\n#loc3 = loc("/a/x.py":7:11 to :22)\n'
        "    d:f32[8] = tanh c                     # /a/x.py:7:11 (g)\n"
    )
    b = (
        '%0 = stablehlo.tanh %arg0 : tensor<8xf32> loc(#loc9)\n#loc9 = loc("/b/y.py":9:1 to :5)\n'
        "    d:f32[8] = tanh c      # /b/y.py:9:1 (h)\n"
    )
    assert normalize(a) == normalize(b)
    assert "stablehlo.tanh %arg0 : tensor<8xf32>" in normalize(a)
    assert ir_diff("stablehlo", a, b).identical
