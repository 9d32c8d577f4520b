"""Where an instruction came from in Python: the module's stack-frame tables read once,
and each instruction's whole stack.

A program compiled from source names its frames through `metadata={... stack_frame_id=N}`,
resolved in the tables printed before the first computation:

    FileNames          1 "/home/me/mlp.py"
    FunctionNames      1 "forward"
    FileLocations      1 {file_name_id=1 function_name_id=1 line=21 ...}
    StackFrames        1 {file_location_id=1 parent_frame_id=1}

jax 0.10's printer writes each frame's `parent_frame_id` one above the frame it means
(0 printed as 1: the first frame names itself, which no real frame can), so a module whose
frame 1 names itself as parent is read with every parent one lower. An uploaded program's
HLO has its position written in as `source_file`/`source_line` instead
(`workers.compiler.source_tags`).

Frames of Boundary's own code (the export wrapper, the worker's stages) are left out of
every stack: they are never the user's program. Of what is left, the innermost frame
outside installed packages and Python's own library is the user's, and the innermost
frame inside them, when it lies within the user's call, is the library's (a flax layer
that the user's line called).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from workers.export.sources import boundary_frame
from workers.protocol.hlo.syntax import TABLE_FIELD, TABLE_ROW, quoted, unquoted

SOURCE_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
"""The tables, in the order XLA prints them."""

_LIBRARY = re.compile(r"/(?:site|dist)-packages/(?!workers/)|/lib/python\d[\d.]*/(?!.*-packages/)")
"""An installed package's or Python's own file. Boundary's own catalog workloads
(`workers/...`), once installed, are the program's code, not a library's."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame: a file as the program spells it, a 1-based line, the function."""

    file: str
    line: int
    function: str | None = None

    @property
    def place(self) -> str:
        """`mlp.py:21`: the file's own name and the line."""
        return f"{self.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True, slots=True)
class Source:
    """An instruction's Python stack, innermost frame first, Boundary's frames left out."""

    stack: tuple[Frame, ...]
    user: Frame | None
    """The innermost frame in the user's own files (outside installed packages)."""
    library: Frame | None
    """The innermost frame inside an installed package, when the user's line called into
    one (flax's `Dense.__call__` under `mlp.py:21`); None otherwise."""


@lru_cache(maxsize=4096)
def library_file(file: str) -> bool:
    """Whether `file` belongs to an installed package or Python's own library (or is no
    file at all, like `<string>`)."""
    shown = file.replace("\\", "/")
    return shown.startswith("<") or _LIBRARY.search(shown) is not None


@lru_cache(maxsize=4096)
def _own(file: str) -> bool:
    return boundary_frame(file)


def source_of(frames: tuple[Frame, ...]) -> Source | None:
    """The Source of a stack (innermost first) with Boundary's frames taken out; None when
    nothing is left."""
    stack = tuple(f for f in frames if not _own(f.file))
    if not stack:
        return None
    user_at = next((k for k, f in enumerate(stack) if not library_file(f.file)), None)
    user = stack[user_at] if user_at is not None else None
    inside = stack[:user_at] if user_at is not None else stack
    return Source(stack, user, inside[0] if inside else None)


class SourceTables:
    """A module's four source tables, read once; `source(frame_id)` resolves a stack."""

    def __init__(self, rows: dict[str, dict[int, str]]) -> None:
        self.rows = rows
        files = {k: unquoted(v.strip()) for k, v in rows.get("FileNames", {}).items()}
        functions = {k: unquoted(v.strip()) for k, v in rows.get("FunctionNames", {}).items()}
        self._places: dict[int, Frame] = {}
        for k, row in rows.get("FileLocations", {}).items():
            fields = dict(TABLE_FIELD.findall(row))
            if "file_name_id" in fields and "line" in fields:
                function = functions.get(int(fields.get("function_name_id", 0)))
                file = files.get(int(fields["file_name_id"]), "?")
                self._places[k] = Frame(file, int(fields["line"]), function)
        self._frames: dict[int, tuple[int, int]] = {}
        for k, row in rows.get("StackFrames", {}).items():
            fields = dict(TABLE_FIELD.findall(row))
            self._frames[k] = (
                int(fields.get("file_location_id", 0)),
                int(fields.get("parent_frame_id", 0)),
            )
        self._shift = 1 if self._frames.get(1, (0, 0))[1] == 1 else 0
        self._sources: dict[int, Source | None] = {}

    def __bool__(self) -> bool:
        return bool(self.rows)

    def stack(self, frame: int) -> tuple[Frame, ...]:
        """The frames from `frame` outwards (a parent is always an earlier frame)."""
        found: list[Frame] = []
        while frame in self._frames:
            location, parent = self._frames[frame]
            place = self._places.get(location)
            if place is not None and place not in found:
                found.append(place)
            parent -= self._shift
            if not 0 < parent < frame:
                break
            frame = parent
        return tuple(found)

    def source(self, frame: int) -> Source | None:
        """The Source of the stack frame `frame` (None when it names nothing of the user's)."""
        if frame not in self._sources:
            self._sources[frame] = source_of(self.stack(frame))
        return self._sources[frame]


def read_table_row(table: dict[int, str], line: str) -> bool:
    """Add one row to a table; False when `line` is no row (the table has ended)."""
    found = TABLE_ROW.match(line.strip())
    if found is None:
        return False
    table[int(found[1])] = found[2]
    return True


class StackTable:
    """The writer of the four source tables, for a module that has none: the stacks added
    (each innermost first) become frames, each sharing its callers' frames, numbered from 1
    with the outermost first, printed as XLA prints them (a frame without a caller names
    none). `read_hlo` reads them back to the same stacks."""

    def __init__(self) -> None:
        self.files: dict[str, int] = {}
        self.functions: dict[str, int] = {}
        self.places: dict[tuple[int, int, int], int] = {}
        self.frames: dict[tuple[int, int], int] = {}

    def add(self, stack: tuple[Frame, ...]) -> int:
        """The frame id of `stack` (innermost first); 0 for an empty one."""
        frame = 0
        for f in reversed(stack):
            file = self.files.setdefault(f.file, len(self.files) + 1)
            function = self.functions.setdefault(f.function or "", len(self.functions) + 1)
            place = self.places.setdefault((file, function, f.line), len(self.places) + 1)
            frame = self.frames.setdefault((place, frame), len(self.frames) + 1)
        return frame

    @staticmethod
    def field(frame: int) -> tuple[str, str]:
        """The metadata field (key, value as printed) naming a frame."""
        return ("stack_frame_id", str(frame))

    def text(self) -> str:
        """The tables, each followed by a blank line; '' when no stack was added."""
        if not self.frames:
            return ""
        rows = [
            ("FileNames", [f"{n} {quoted(file)}" for file, n in self.files.items()]),
            ("FunctionNames", [f"{n} {quoted(name)}" for name, n in self.functions.items()]),
            (
                "FileLocations",
                [
                    f"{n} {{file_name_id={file} function_name_id={function} line={line}}}"
                    for (file, function, line), n in self.places.items()
                ],
            ),
            (
                "StackFrames",
                [
                    f"{n} {{file_location_id={place}"
                    + (f" parent_frame_id={parent}}}" if parent else "}")
                    for (place, parent), n in self.frames.items()
                ],
            ),
        ]
        return "".join(f"{name}\n" + "".join(r + "\n" for r in body) + "\n" for name, body in rows)

    def placed_in(self, hlo: str) -> str:
        """`hlo` with the tables after its module's header line, where XLA prints them."""
        head, newline, rest = hlo.partition("\n")
        return f"{head}{newline}\n{self.text()}{rest.lstrip(chr(10))}" if self.frames else hlo
