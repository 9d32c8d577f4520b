"""HLO text has one reader (STYLE.md, rule 14): `workers.protocol.hlo`. No other module of
the server or the workers spells the syntax of an instruction's metadata or of the
stack-frame tables (a second reader of them), and none reaches into the reader's own
modules (its syntax, its frames) past the package's public names."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.app.test_structure import PACKAGES, ROOT, _write, imports, modules_of, parsed

READER = "workers.protocol.hlo"
MARKERS = (
    "metadata=",
    "stack_frame_id",
    "source_file=",
    "source_line=",
    "op_name=",
    "FileNames",
    "FunctionNames",
    "FileLocations",
    "StackFrames",
)
"""What only a reader of HLO's metadata or stack-frame tables needs to spell."""


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstrings' nodes: prose may name the syntax it describes."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def second_readers(root: Path) -> list[str]:
    """Each string in code outside the reader that spells HLO metadata or its tables."""
    offenders = []
    for name, path in sorted(modules_of(root, PACKAGES).items()):
        if name == READER or name.startswith(READER + "."):
            continue
        tree = parsed(path)
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            spelled = [m for m in MARKERS if m in node.value]
            if spelled and id(node) not in prose:
                offenders.append(f"{name}:{node.lineno} {spelled[0]}")
    return offenders


def inside_the_reader(root: Path) -> list[str]:
    """Imports of the reader's own modules from outside it."""
    return [
        f"{name}:{imp.line} {imp.module}"
        for name, path in sorted(modules_of(root, PACKAGES).items())
        if not name.startswith(READER)
        for imp in imports(root, path)
        if imp.module.startswith(READER + ".")
    ]


def test_hlo_metadata_and_stack_frames_are_read_in_one_place() -> None:
    assert second_readers(ROOT) == []


def test_consumers_use_the_readers_public_names() -> None:
    assert inside_the_reader(ROOT) == []


def test_the_rules_find_a_second_reader_planted_in_a_small_tree(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/ir.py": (
                '"""Reads `metadata={...}` (prose is fine)."""\n'
                "import re\n"
                "from workers.protocol.hlo.syntax import FIELD\n"
                'META = re.compile(r",\\s*metadata=\\{[^{}]*\\}")\n'
                'def tables(line):\n    return line.strip() in ("StackFrames",)\n'
            ),
            "workers/__init__.py": "",
            "workers/protocol/__init__.py": "",
            "workers/protocol/hlo/__init__.py": "from workers.protocol.hlo.syntax import FIELD\n",
            "workers/protocol/hlo/syntax.py": 'FIELD = "metadata={" + "stack_frame_id"\n',
        },
    )
    assert second_readers(tmp_path) == ["app.ir:4 metadata=", "app.ir:6 StackFrames"]
    assert inside_the_reader(tmp_path) == ["app.ir:3 workers.protocol.hlo.syntax"]
