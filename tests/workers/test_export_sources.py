"""The Python lines export-fn sends beside an artifact (workers.export.sources): which lines
a module names, the bounded document, and every refusal of a malformed one naming its
field. Pure Python: no jax, no server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from workers.export.sources import (
    MAX_FILES,
    MAX_LINE_CHARS,
    MAX_LINES,
    MAX_SOURCES_BYTES,
    SOURCES_FORMAT,
    SourcesError,
    parse_sources,
    referenced_positions,
    sources_document,
)

SHA = "ab" * 32

# A module as jax prints it with its locations: an op in the user's `heads`, called from
# `forward`, itself called by export-fn's wrapper (Boundary's own frame, never sent).
MODULE = """\
module @jit_forward {
  func.func public @main(%arg0: tensor<8xf32> loc("x")) -> tensor<8xf32> {
    %0 = stablehlo.multiply %arg0, %arg0 : tensor<8xf32> loc(#loc7)
    %1 = stablehlo.add %0, %0 : tensor<8xf32> loc(#loc8)
    return %1 : tensor<8xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc1 = loc("/home/me/model.py":12:8 to :20)
#loc2 = loc("/home/me/model.py":30:4)
#loc3 = loc("/opt/boundary/workers/export/trees.py":305:26)
#loc4 = loc("/home/me/model.py":13:8)
#loc5 = loc(callsite(#loc2 at #loc3))
#loc6 = loc(callsite(#loc1 at #loc5))
#loc7 = loc("jit(forward)/mul"(#loc6))
#loc8 = loc("jit(forward)/add"(callsite(#loc4 at #loc5)))
"""
MODEL = [f"line {n} of model.py\n" for n in range(1, 41)]


def read(path: str) -> list[str]:
    return MODEL if path == "/home/me/model.py" else []


def test_the_lines_an_op_names_come_first_then_its_callers() -> None:
    # #loc8 holds its callsite inline: the position inside it counts, after the op lines.
    assert referenced_positions(MODULE) == [
        ("/home/me/model.py", 12),
        ("/home/me/model.py", 30),
        ("/home/me/model.py", 13),
    ]


def test_the_document_holds_each_named_line_with_two_around_it() -> None:
    document = json.loads(sources_document(MODULE, SHA, read))
    assert document["format"] == SOURCES_FORMAT and document["artifact"] == SHA
    assert not document["cut"]
    (model,) = document["files"]  # Boundary's own file is never read nor sent
    assert model["path"] == "/home/me/model.py"
    assert sorted(int(n) for n in model["lines"]) == [10, 11, 12, 13, 14, 15, 28, 29, 30, 31, 32]
    assert model["lines"]["12"] == "line 12 of model.py"  # no line break
    sent = parse_sources(json.dumps(document).encode())
    assert sent.summary() == {"artifact": SHA, "files": 1, "lines": 11, "cut": False}


def test_a_long_program_is_cut_to_the_bounds_named_lines_first() -> None:
    many = "\n".join(f'#loc{n} = loc("/m/f{n % 80}.py":{n}:1)' for n in range(1, 6000))
    ops = "\n".join(f"  %{n} = stablehlo.add %a, %a loc(#loc{n})" for n in range(1, 6000))
    wide = ["x" * 1000 + "\n"] * 7000
    data = sources_document(f"{ops}\n{many}\n", SHA, lambda path: wide)
    assert len(data) <= MAX_SOURCES_BYTES
    sent = parse_sources(data)
    assert sent.cut and len(sent.files) <= MAX_FILES and sent.line_count <= MAX_LINES
    line = next(iter(sent.files[0].lines.values()))
    assert len(line) == MAX_LINE_CHARS and line.endswith("…")  # a long line, cut
    first = sent.files[0]
    assert 1 in first.lines  # the first named line of the first file is among those sent


def document(**changes: Any) -> bytes:
    base: dict[str, Any] = {
        "format": SOURCES_FORMAT,
        "artifact": SHA,
        "files": [{"path": "/home/me/model.py", "lines": {"12": "    y = x @ w"}}],
    }
    base.update(changes)
    return json.dumps(base).encode()


def lines(value: Any) -> bytes:
    return document(files=[{"path": "/home/me/model.py", "lines": value}])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "the document is not UTF-8 text"),
        (b"{", "not JSON (Expecting property name enclosed in double quotes at line 1)"),
        (b'{"cut": NaN}', "not JSON: NaN is no JSON value"),
        (b"[]", "the document: expected an object, not list"),
        (document(format="other/2"), "format: expected 'boundary-sources/1', not \"other/2\""),
        (document(artifact="abc"), "artifact: the SHA-256 of the .jaxexport (64 hex digits)"),
        (document(cut="yes"), 'cut: true or false, not "yes"'),
        (document(extra=1), "extra: unknown field"),
        (document(files={}), "files: expected a list, not dict"),
        (document(files=[{"path": "/a.py"}]), "files[0].lines: missing"),
        (
            document(files=[{"path": 3, "lines": {}}]),
            "files[0].path: expected the file's path, not int",
        ),
        (
            document(files=[{"path": "/a\nb.py", "lines": {}}]),
            "files[0].path: at most 1000 printable characters",
        ),
        (
            document(files=[{"path": "/a.py", "lines": {}}] * 2),
            'files[1].path: "/a.py" is listed twice',
        ),
        (
            document(files=[{"path": f"/{n}.py", "lines": {}} for n in range(65)]),
            "files: 65 files (at most 64)",
        ),
        (lines({"0": "x"}), 'files[0].lines["0"]: a line number is a whole number from 1'),
        (
            lines({"twelve": "x"}),
            'files[0].lines["twelve"]: a line number is a whole number from 1',
        ),
        (lines({"12": 12}), 'files[0].lines["12"]: expected the line\'s text, not int'),
        (lines({"12": "a\nb"}), 'files[0].lines["12"]: one line, without line breaks'),
        (lines({"12": "x" * 401}), 'files[0].lines["12"]: 401 characters (at most 400)'),
        (
            lines({str(n): "" for n in range(1, 4002)}),
            "files[0].lines: more than 4,000 lines in all",
        ),
        (b'{"format": "a", "format": "b"}', '"format": named twice'),
        (b" " * (MAX_SOURCES_BYTES + 1), "the document is over 262,144 bytes"),
    ],
)
def test_a_malformed_document_is_refused_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(SourcesError) as refused:
        parse_sources(data)
    assert str(refused.value) == message


def test_a_refusal_never_echoes_a_long_value() -> None:
    with pytest.raises(SourcesError) as refused:
        parse_sources(document(format="x" * 5000))
    assert len(str(refused.value)) < 120
