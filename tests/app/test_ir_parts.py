"""The IR view's parts on their own: lexers, folds, source maps, paging, SASS terms, the
view of an exported function (no source), and the contrast of every colour it uses."""

from __future__ import annotations

import re

import pytest

from app.ir.folds import block_folds, inline_folds
from app.ir.lexers import lexer_for
from app.ir.render import TOKEN_CLASSES, token_class
from app.ir.sources import source_map
from app.ir.thunks import thunk_sequence
from app.ir.view import MAX_HITS, PAGE_LINES, PART_LINES, build_view
from app.web.assets import STATIC_DIR

HLO = """HloModule jit_f, is_scheduled=true

FileNames
1 "/srv/w/workers/workloads/f.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 end_column=13}
2 {file_name_id=1 function_name_id=1 line=9 end_line=9 column=11 end_column=19}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}


ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0), metadata={op_name="x"}
  %all-reduce-start = f32[8]{0} all-reduce-start(%x), replica_groups={}, to_apply=%add, metadata={op_name="jit(f)/psum" stack_frame_id=2}
  ROOT %f = f32[8]{0} fusion(%x), kind=kLoop, calls=%c, backend_config={"fusion_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"4"}}}
}
"""  # noqa: E501

SASS = """        code for sm_90
                Function : gemm_fusion_dot
        /*0000*/                   LDC R1, c[0x0][0x28] ;                           /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 HMMA.16816.F32 R4, R8, R12, R4 ;                 /* 0x0000000c0804723c */
        /*0020*/                   LDG.E R2, desc[UR4][R2.64] ;                     /* 0x0000000402027981 */
        /*0030*/                   HMMA.16816.F32 R4, R8, R12, R4 ;                 /* 0x0000000c0804723c */
"""  # noqa: E501


def _kinds(artifact: str, text: str) -> list[tuple[str, str]]:
    found = []
    for kind, value in lexer_for(artifact).get_tokens(text):
        if value.strip() and token_class(kind):
            found.append((token_class(kind), value))
    return found


def test_the_hlo_lexer_marks_opcodes_shapes_and_collectives() -> None:
    kinds = _kinds("hlo", HLO.splitlines()[19])
    assert ("bi", "all-reduce-start") in kinds
    assert ("ty", "f32[8]{0}") in kinds and ("va", "%x") in kinds
    assert ("at", "replica_groups") in kinds
    assert ("op", "fusion") in _kinds("hlo", HLO.splitlines()[20])


def test_the_sass_lexer_marks_opcodes_registers_and_predicates() -> None:
    kinds = _kinds("sass", SASS.splitlines()[3])
    assert ("op", "HMMA.16816.F32") in kinds and ("va", "R4") in kinds
    assert ("kw", "@!P0") in kinds and ("cm", "/*0010*/") in kinds
    assert ("co", "c[0x0][0x28]") in _kinds("sass", SASS.splitlines()[2])


def test_the_mlir_and_jaxpr_lexers_mark_ops_types_and_source_notes() -> None:
    mlir = _kinds("stablehlo", "%0 = stablehlo.all_reduce %a : tensor<8xf32> loc(#loc3)")
    assert ("bi", "stablehlo.all_reduce") in mlir and ("ty", "tensor<8xf32>") in mlir
    assert any(cls == "cm" and "#loc3" in v for cls, v in mlir)
    jaxpr = _kinds("jaxpr", "    d:f32[8] = psum c  # /a/f.py:7:11 (g)")
    assert ("bi", "psum") in jaxpr and ("ty", "f32[8]") in jaxpr
    assert ("cm", "# /a/f.py:7:11 (g)") in jaxpr


def test_folds_cover_metadata_long_configs_tables_and_notes() -> None:
    lines = HLO.splitlines()
    entry = lines[19]
    spans = inline_folds("hlo", entry)
    assert [entry[a:b] for a, b in spans] == [', metadata={op_name="jit(f)/psum" stack_frame_id=2}']
    config = inline_folds("hlo", lines[20])
    assert lines[20][config[0][0] :].startswith(", backend_config={") and len(config) == 1
    short = '  %c = f32[] constant(1), backend_config={"a":1}'
    assert inline_folds("hlo", short) == []  # a short config stays in view
    (block,) = block_folds("hlo", lines)
    assert lines[block.start] == "FileNames" and lines[block.end - 1].startswith("2 {file_loc")
    assert "FileNames, FunctionNames, FileLocations, StackFrames" in block.label
    mlir = ["%0 = stablehlo.tanh %a : tensor<8xf32> loc(#loc3)", '#loc3 = loc("f.py":7:1)']
    assert [mlir[0][a:b] for a, b in inline_folds("stablehlo", mlir[0])] == [" loc(#loc3)"]
    assert [(b.start, b.end) for b in block_folds("stablehlo", mlir)] == [(1, 2)]


def test_hlo_stack_frames_resolve_through_the_tables() -> None:
    smap = source_map("hlo", HLO.splitlines())
    assert smap.positions[19][0] == ("/srv/w/workers/workloads/f.py", 9)
    assert 18 not in smap.positions  # metadata without a frame names no line


def test_an_exported_function_shows_the_positions_the_ir_names() -> None:
    view = build_view("hlo", HLO, "/runs/x/ir/hlo")  # no source: the server has none
    assert view.source is not None
    assert "Source positions the IR names" in view.source_title
    assert "/srv/w/workers/workloads/f.py:9" in str(view.source)
    assert 'data-src="/srv/w/workers/workloads/f.py:9"' in str(view.lines)


def test_paging_without_javascript_and_parts_with_it() -> None:
    text = "\n".join(f"  %v{i} = f32[] constant({i})" for i in range(2 * PAGE_LINES + 7))
    first = build_view("hlo", text, "/r")
    assert (first.start, first.end) == (0, PAGE_LINES)
    assert first.next_url == f"/r?start={PAGE_LINES + 1}" and first.prev_url is None
    last = build_view("hlo", text, "/r", start=2 * PAGE_LINES + 3)
    assert (last.start, last.end) == (2 * PAGE_LINES, 2 * PAGE_LINES + 7)
    assert last.prev_url == f"/r?start={PAGE_LINES + 1}" and last.next_url is None
    part = build_view("hlo", text, "/r", start=PAGE_LINES + 1, part=True)
    assert (part.start, part.end) == (PAGE_LINES, PAGE_LINES + PART_LINES)
    assert part.more_url == f"/r?start={PAGE_LINES + PART_LINES + 1}&part=lines"
    hits = build_view("hlo", text, "/r", q="constant")
    assert hits.hits == 2 * PAGE_LINES + 7 and str(hits.lines).count('class="l') == MAX_HITS


def test_sass_search_suggests_the_opcodes_the_text_uses_first() -> None:
    view = build_view("sass", SASS, "/r")
    assert view.terms[0] == "HMMA.16816.F32"  # the most frequent first
    assert "LDG.E" in view.terms and "BAR.SYNC" in view.terms


def _luminance(colour: str) -> float:
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_every_token_colour_and_the_line_numbers_keep_4_5_to_1() -> None:
    css = (STATIC_DIR / "ir.css").read_text()
    block = css[css.index(".ir-view {") : css.index("}", css.index(".ir-view {"))]
    colours = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", block))
    backgrounds = [colours["ir-bg"], colours["hit"]] + [colours[f"sel-{i}"] for i in range(8)]
    foregrounds = {name: colours[f"tok-{name}"] for name in TOKEN_CLASSES}
    foregrounds |= {"line numbers": colours["ir-ln"], "text": colours["ir-fg"]}
    for name in TOKEN_CLASSES:  # each class is coloured from its variable
        assert re.search(rf"\.ir-view \.{name} \{{ color: var\(--tok-{name}\)", css), name
    low = [
        (name, fg, bg, round(_contrast(fg, bg), 2))
        for name, fg in foregrounds.items()
        for bg in backgrounds
        if _contrast(fg, bg) < 4.5
    ]
    assert not low, low


@pytest.mark.parametrize("artifact", ["hlo", "stablehlo", "jaxpr", "sass", "ptx"])
def test_markup_escapes_the_text(artifact: str) -> None:
    view = build_view(artifact, 'a <script>alert("x")</script> & b\n', "/r")
    html = str(view.lines)
    assert "<script" not in html and "</script" not in html and "&lt;" in html


def test_a_thunk_sequence_with_numbers_of_thousands_of_digits_is_read_not_raised() -> None:
    big = "9" * 5000
    text = (
        f"{big}: kKernel [source | next=002 (1)] loop_fusion\n"
        "002: kCustomKernel [prev=001 (1) | sink] gemm grid: [8, 1, 1] threads: [64, 1, 1]"
        f"  shared_memory: {big} bytes\n"
    )
    thunks = thunk_sequence(text)
    assert [(t.order, t.kernel, t.shared_bytes) for t in thunks] == [(2, "gemm", None)]
