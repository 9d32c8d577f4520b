"""The one HLO reader (`workers.protocol.hlo`): every part of an instruction read, whole
Python stacks with the user's own frame and the library's beside it, a line that does not
parse named, a cut text read to its last whole instruction."""

from __future__ import annotations

import pytest

from workers.protocol.hlo import (
    HloSyntaxError,
    attribute_spans,
    read_hlo,
    with_metadata,
    without_metadata,
)

# Printed by jax 0.10 for `outer(x) = helper(x) + 1` with `helper(x) = sin(x) * 2` in
# prog.py, and a flax-like layer in site-packages; frame 1 names itself as parent (the
# printer writes each parent one above the frame it means).
MODULE = """HloModule jit_outer, is_scheduled=true, num_partitions=2

FileNames
1 "/home/me/prog.py"
2 "/home/me/.venv/lib/python3.11/site-packages/flax/linen/linear.py"
3 "/work/boundary/workers/run/stages.py"

FunctionNames
1 "<module>"
2 "outer"
3 "helper"
4 "Dense.__call__"
5 "trace_and_lower"

FileLocations
1 {file_name_id=3 function_name_id=5 line=80 end_line=80 column=1 end_column=2}
2 {file_name_id=1 function_name_id=2 line=5 end_line=5 column=8 end_column=17}
3 {file_name_id=1 function_name_id=3 line=3 end_line=3 column=11 end_column=25}
4 {file_name_id=2 function_name_id=4 line=250 end_line=250 column=1 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=3}
4 {file_location_id=4 parent_frame_id=4}


%fused_computation (param_0.2: f32[4]) -> f32[4] {
  %param_0.2 = f32[4]{0} parameter(0)
  %sin.0 = f32[4]{0} sine(%param_0.2), metadata={op_name="jit(outer)/sin" stack_frame_id=3}
  ROOT %dot.1 = f32[4]{0} multiply(%sin.0, %param_0.2), metadata={op_name="jit(outer)/dot_general" stack_frame_id=4}
}

ENTRY %main.1 (x.1: f32[4], y: f32[4]) -> (f32[4], s8[16]) {
  %x.1 = f32[4]{0} parameter(0), sharding={replicated}, frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{}]>"}, metadata={op_name="params[\\'w\\']"}
  %y = f32[4]{0} parameter(1), metadata={op_name="x"}
  %fusion = f32[4]{0} fusion(%x.1, f32[4]{0} %y), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(outer)/{odd}name" source_file="/home/me/prog.py" source_line=6}, backend_config={"kind":"__triton","tiles":[{"sizes":["1","8"]}]}
  %ar = f32[4]{0} all-reduce(%fusion), channel_id=1, replica_groups=[1,2]<=[2], to_apply=%fused_computation
  ROOT %t = (f32[4]{0}, s8[16]{0}) tuple(%ar, %ar)
}
"""  # noqa: E501


def line_of(text: str, start: str) -> int:
    """The 1-based number of the first line of `text` that starts with `start`."""
    return next(n for n, line in enumerate(text.split("\n"), 1) if line.startswith(start))


def test_an_instruction_is_read_whole_and_frozen() -> None:
    module = read_hlo(MODULE)
    fusion = module.by_name["fusion"]
    assert (fusion.opcode, fusion.shape, fusion.operands) == ("fusion", "f32[4]{0}", ("x.1", "y"))
    assert fusion.attributes == (("kind", "kLoop"), ("calls", "%fused_computation"))
    assert fusion.fusion_kind == "kLoop" and fusion.called == ("fused_computation",)
    assert fusion.backend_config == '{"kind":"__triton","tiles":[{"sizes":["1","8"]}]}'
    assert fusion.backend_kind == "__triton"
    # A brace inside a quoted name does not end the metadata.
    assert fusion.op_name == "jit(outer)/{odd}name" and fusion.jax_op == "{odd}name"
    assert fusion.line == line_of(MODULE, "  %fusion") and fusion.computation == "main.1"
    assert fusion.entry and not module.by_name["sin.0"].entry
    ar = module.by_name["ar"]
    assert ar.attribute("replica_groups") == "[1,2]<=[2]" and ar.called == ("fused_computation",)
    assert module.by_name["t"].root and module.partitions == 2
    with pytest.raises(AttributeError, match="frozen"):
        fusion.opcode = "copy"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        fusion.source = None  # set once, when it was built


def test_parameters_are_numbered_and_named_by_their_pytree_path() -> None:
    params = read_hlo(MODULE).parameters()
    assert [(p.parameter_number, p.parameter_path) for p in params] == [
        (0, "params['w']"),
        (1, "x"),
    ]


def test_a_stack_is_whole_with_the_users_frame_and_the_librarys_beside_it() -> None:
    module = read_hlo(MODULE)
    dot = module.by_name["dot.1"].source
    assert dot is not None and dot.user is not None and dot.library is not None
    # linear.py:250 (the library, innermost) was called from helper (prog.py:3), called
    # from outer (prog.py:5), itself called by Boundary's stage (left out).
    assert [f.place for f in dot.stack] == ["linear.py:250", "prog.py:3", "prog.py:5"]
    assert (dot.user.place, dot.user.function, dot.library.place) == (
        "prog.py:3",
        "helper",
        "linear.py:250",
    )
    sin = module.by_name["sin.0"].source
    assert sin is not None and [f.place for f in sin.stack] == ["prog.py:3", "prog.py:5"]
    assert sin.library is None and sin.user is not None and sin.user.function == "helper"
    written = module.by_name["fusion"].user_frame  # source_file/source_line written in
    assert written is not None and written.place == "prog.py:6"


def test_a_line_that_does_not_parse_is_named() -> None:
    broken = MODULE.replace("  %y = f32[4]{0} parameter(1)", "  %y = f32[4]{0}")
    with pytest.raises(HloSyntaxError, match=rf"^line {line_of(MODULE, '  %y')}: not an instr"):
        read_hlo(broken)
    unclosed = MODULE.replace("tuple(%ar, %ar)", "tuple(%ar, %ar")
    with pytest.raises(HloSyntaxError, match=rf"^line {line_of(MODULE, '  ROOT %t')}: its op"):
        read_hlo(unclosed)
    odd = MODULE.replace("channel_id=1,", "channel_id=1,,")
    with pytest.raises(HloSyntaxError, match=rf"^line {line_of(MODULE, '  %ar')}: its attrib"):
        read_hlo(odd)
    with pytest.raises(HloSyntaxError, match="neither a module header"):
        read_hlo("HloModule m\n\nthis is no HLO\n")


def test_a_cut_text_is_read_to_its_last_whole_instruction() -> None:
    cut = MODULE[: MODULE.index("  %ar = ") + 20]  # mid-line, inside the entry
    with pytest.raises(HloSyntaxError, match="the text ends inside a computation"):
        read_hlo(cut[: cut.rindex("\n") + 1])  # whole lines, yet not marked as cut
    module = read_hlo(cut, cut=True)
    assert module.cut and module.entry is not None and module.entry.cut
    assert [i.name for i in module.entry.instructions] == ["x.1", "y", "fusion"]
    assert not read_hlo(MODULE).cut


def test_attribute_spans_and_the_metadata_writer() -> None:
    line = MODULE.splitlines()[line_of(MODULE, "  %fusion") - 1]
    spans = {key: line[start:end] for key, start, end in attribute_spans(line)}
    assert spans["metadata"].startswith(", metadata={op_name=") and spans["metadata"].endswith("}")
    assert without_metadata(line) == line.replace(spans["metadata"], "")
    assert "metadata=" not in without_metadata(line) and "backend_config=" in line
    bare = "  %n = f32[4]{0} negate(%x), backend_config={}"
    written = with_metadata(bare, lambda fields: [*fields, ("source_line", "7")])
    assert written == "  %n = f32[4]{0} negate(%x), metadata={source_line=7}, backend_config={}"
    assert with_metadata("FileNames", lambda fields: [("a", "1")]) == "FileNames"


def test_a_text_of_several_modules_reads_each_with_its_own_stack_frames() -> None:
    second = MODULE.replace("HloModule jit_outer", "HloModule jit_other").replace(
        '1 "/home/me/prog.py"', '1 "/home/me/other.py"'
    )
    second = second.replace("%sin.0", "%sin.9").replace("%dot.1 ", "%dot.9 ")
    module = read_hlo(MODULE + "\n" + second)
    assert module.name == "jit_outer" and len(module.computations) == 4
    first, other = module.by_name["sin.0"].source, module.by_name["sin.9"].source
    assert first is not None and first.user is not None and first.user.place == "prog.py:3"
    assert other is not None and other.user is not None and other.user.place == "other.py:3"


def test_a_computation_closed_with_its_attributes_is_read() -> None:
    """libtpu closes a computation that runs on a TPU7x's SparseCore with its execution
    thread (`}, execution_thread="sparsecore"`), found compiling a collective for
    tpu7x:2x2x1: the computation ends there, and the rest is read."""
    from workers.protocol.hlo import read_hlo

    text = (
        "HloModule m, entry_computation_layout={(f32[8]{0})->f32[8]{0}}\n\n"
        "%sparse (p: f32[8]) -> f32[8] {\n"
        "  ROOT %p = f32[8]{0} parameter(0)\n"
        '}, execution_thread="sparsecore"\n\n'
        "ENTRY %main (a: f32[8]) -> f32[8] {\n"
        "  ROOT %a = f32[8]{0} parameter(0)\n"
        "}\n"
    )
    module = read_hlo(text)
    assert [c.name for c in module.computations] == ["sparse", "main"]
    assert module.entry is not None and module.entry.name == "main"


def test_comment_lines_are_skipped_wherever_they_are() -> None:
    from workers.protocol.hlo import read_hlo

    text = (
        "// a note before the module\n"
        "HloModule m\n\n"
        "ENTRY %main (a: f32[8]) -> f32[8] {\n"
        "  // a note inside it\n"
        "  ROOT %a = f32[8]{0} parameter(0)\n"
        "}\n"
    )
    module = read_hlo(text)
    assert [i.name for i in module.instructions()] == ["a"]
