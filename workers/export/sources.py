"""The Python lines an exported program names, sent beside it so that the pages can show
the line itself next to its `file:line`.

The exported StableHLO keeps each op's location: the user's `"model.py":92:20`, and the
frames that called it. The server never has the user's files, but `boundary export-fn`
runs where they are: it reads the lines the module names, with a few lines around each,
and writes them as a small JSON document (`boundary-sources/1`) uploaded with the
artifact, unless `--no-source`:

    {"format": "boundary-sources/1", "artifact": "<the .jaxexport's SHA-256>",
     "cut": false, "files": [{"path": "/home/me/model.py",
                              "lines": {"91": "def heads(name):", "92": "    q = x @ w"}}]}

A path is spelled exactly as the module spells it (so the pages find it under the same
key as the IR's positions); a line is its text without the line break. The document is
bounded (MAX_SOURCES_BYTES, MAX_FILES, MAX_LINES, MAX_LINE_CHARS): export-fn keeps the
lines the ops name first, then their callers, then the lines around them, and says `cut`
when the bounds left some out. The server checks it with `parse_sources` (every refusal
names its field) and treats the text as untrusted (the pages escape it).

Jax-free and pydantic-free, like the rest of `workers.export`'s readers: the standard
library only, for export-fn and the server alike.
"""

from __future__ import annotations

import json
import linecache
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BOUNDARY_FRAMES",
    "MAX_SOURCES_BYTES",
    "SOURCES_FORMAT",
    "SOURCES_MEDIA_TYPE",
    "SentFile",
    "SentSources",
    "SourcesError",
    "boundary_frame",
    "parse_sources",
    "referenced_positions",
    "sources_document",
]

SOURCES_FORMAT = "boundary-sources/1"
SOURCES_MEDIA_TYPE = "application/vnd.boundary.sources+json"
"""The media type of a sources document; the store keeps it as `…; artifact=<sha256>`."""
MAX_SOURCES_BYTES = 256 * 1024
MAX_FILES = 64
MAX_LINES = 4000
MAX_LINE_CHARS = 400
MAX_PATH_CHARS = 1000
CONTEXT = 2
"""Lines sent before and after each line the module names."""

BOUNDARY_FRAMES = (
    "workers/export/",
    "workers/cli/",
    "workers/run/",
    "workers/agent/",
    "app/cli.py",
    "bin/boundary",
)
"""Where Boundary's own code sits in an uploaded program's source locations: the export
wrapper and the command that ran it (recorded on the user's machine), the worker's call
and stages. Matched by folder, so any install of Boundary is recognised; a catalog
workload's own lines (workers/workloads/) are not among them."""

Position = tuple[str, int]
"""A file as the module spells it, and a 1-based line."""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LINE_KEY = re.compile(r"^[1-9]\d{0,8}$")
_DEF = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_USE = re.compile(r"\bloc\((#loc\d*)\)\s*$")
_FILE = re.compile(r'^"((?:[^"\\]|\\.)*)":(\d{1,9}):\d+')
_ANY_FILE = re.compile(r'"((?:[^"\\]|\\.)*)":(\d{1,9}):\d+')
_NAMED = re.compile(r'^"(?:[^"\\]|\\.)*"\((#loc\d*)\)$')
_CALLSITE = re.compile(r"^callsite\((#loc\d*) at (#loc\d*)\)$")
_FUSED = re.compile(r"^fused(?:<[^>]*>)?\[(.*)\]$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def boundary_frame(file: str) -> bool:
    """Whether a source position's file is Boundary's own code, never the user's."""
    shown = "/" + file.replace("\\", "/")
    return any(
        f"/{part}" in shown if part.endswith("/") else shown.endswith(f"/{part}")
        for part in BOUNDARY_FRAMES
    )


# --- export-fn's side: which lines, and the document -------------------------------------


def referenced_positions(module_text: str) -> list[Position]:
    """The user's positions the module names (Boundary's own frames left out): first each
    op's innermost, which the pages link to, then the frames that called them, then any
    other position its locations hold."""
    lines = module_text.splitlines()
    defs = {m[1]: m[2].strip() for line in lines if (m := _DEF.match(line))}
    memo: dict[str, list[Position]] = {}

    def chain(ref: str, depth: int = 0) -> list[Position]:
        if ref in memo or depth > 64:
            return memo.get(ref, [])
        body = defs.get(ref, "")
        found: list[Position] = []
        if m := _FILE.match(body):
            found = [(m[1], int(m[2]))]
        elif m := _NAMED.match(body):
            found = chain(m[1], depth + 1)
        elif m := _CALLSITE.match(body):
            found = chain(m[1], depth + 1) + chain(m[2], depth + 1)
        elif m := _FUSED.match(body):
            found = [p for part in m[1].split(",") for p in chain(part.strip(), depth + 1)]
        memo[ref] = found
        return found

    first: list[Position] = []
    callers: list[Position] = []
    for line in lines:
        use = None if line.startswith("#loc") else _USE.search(line)
        if use is None:
            continue
        users = [p for p in chain(use[1]) if not boundary_frame(p[0])]
        first += users[:1]
        callers += users[1:]
    rest = [(f, int(n)) for f, n in _ANY_FILE.findall(module_text) if not boundary_frame(f)]
    return list(dict.fromkeys([*first, *callers, *rest]))


def _unescaped(spelled: str) -> str:
    """A path as the module spells it (MLIR escapes `"` and `\\`), as the file system has it."""
    return re.sub(r"\\(.)", r"\1", spelled)


def _clean(line: str) -> str:
    text = line.rstrip("\r\n").replace("\r", " ").replace("\x00", " ")
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def _cost(key: str, text: str) -> int:
    """Bytes a `"key": "text"` pair takes in the document."""
    return (
        len(json.dumps(key, ensure_ascii=False).encode())
        + len(json.dumps(text, ensure_ascii=False).encode())
        + 4
    )


class _Gathered:
    """The lines gathered so far, within the document's bounds."""

    def __init__(self) -> None:
        self.files: dict[str, dict[int, str]] = {}
        self.lines = 0
        self.bytes = 512  # the document's own fields, with room to spare
        self.cut = False

    def add(self, spelled: str, number: int, text: str) -> bool:
        """Keep one line; False once a bound is reached (and the document is cut)."""
        kept = self.files.get(spelled)
        if kept is not None and number in kept:
            return True
        cost = _cost(str(number), text) + (_cost("path", spelled) + 32 if kept is None else 0)
        full = self.lines >= MAX_LINES or self.bytes + cost > MAX_SOURCES_BYTES
        if full or (kept is None and len(self.files) >= MAX_FILES):
            self.cut = True
            return False
        self.files.setdefault(spelled, {})[number] = text
        self.lines += 1
        self.bytes += cost
        return True


def sources_document(
    module_text: str,
    artifact_sha256: str,
    read: Callable[[str], list[str]] = linecache.getlines,
    context: int = CONTEXT,
) -> bytes:
    """The sources document of the program whose StableHLO (printed with its locations)
    is `module_text`: each line it names, read with `read`, and `context` lines around it,
    within the bounds. A file that cannot be read (`<stdin>`, a frozen module) is left out."""
    positions = referenced_positions(module_text)
    gathered = _Gathered()
    readable: dict[str, list[str]] = {}
    # The named lines themselves first, then the lines around them, nearest first.
    for distance in range(context + 1):
        for spelled, number in positions:
            if len(spelled) > MAX_PATH_CHARS or _CONTROL.search(spelled):
                continue
            if spelled not in readable:
                readable[spelled] = read(_unescaped(spelled))
            text = readable[spelled]
            for n in {number - distance, number + distance}:
                if 1 <= n <= len(text) and not gathered.add(spelled, n, _clean(text[n - 1])):
                    break
    document = {
        "format": SOURCES_FORMAT,
        "artifact": artifact_sha256,
        "cut": gathered.cut,
        "files": [
            {"path": path, "lines": {str(n): lines[n] for n in sorted(lines)}}
            for path, lines in gathered.files.items()
        ],
    }
    return json.dumps(document, ensure_ascii=False, indent=None).encode()


# --- the server's side: checking a document sent to it -----------------------------------


class SourcesError(ValueError):
    """A sources document that cannot be used; the message names the field."""


@dataclass(frozen=True)
class SentFile:
    """One file's lines as they were sent: line number → its text."""

    path: str
    lines: dict[int, str]


@dataclass(frozen=True)
class SentSources:
    """A checked sources document."""

    artifact: str
    files: tuple[SentFile, ...]
    cut: bool = False

    @property
    def line_count(self) -> int:
        return sum(len(f.lines) for f in self.files)

    def summary(self) -> dict[str, Any]:
        """JSON-ready: which program, and how much was sent."""
        return {
            "artifact": self.artifact,
            "files": len(self.files),
            "lines": self.line_count,
            "cut": self.cut,
        }


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise SourcesError(f"{_short(key)}: named twice")
        found[key] = value
    return found


def _no_constant(name: str) -> None:
    raise SourcesError(f"not JSON: {name} is no JSON value")


def _short(value: object) -> str:
    """A value as a refusal may quote it: never more than 40 characters of it."""
    text = json.dumps(value) if isinstance(value, str) else type(value).__name__
    return text if len(text) <= 40 else text[:39] + "…"


def _fields(
    where: str, value: object, required: Iterable[str], allowed: set[str]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SourcesError(f"{where or 'the document'}: expected an object, not {_short(value)}")
    for key in value:
        if key not in allowed:
            raise SourcesError(
                f"{where}.{key}: unknown field" if where else f"{key}: unknown field"
            )
    for key in required:
        if key not in value:
            raise SourcesError(f"{where}.{key}: missing" if where else f"{key}: missing")
    return value


def _lines(where: str, value: object, budget: int) -> dict[int, str]:
    if not isinstance(value, dict):
        raise SourcesError(f"{where}: expected an object of line numbers, not {_short(value)}")
    if len(value) > budget:
        raise SourcesError(f"{where}: more than {MAX_LINES:,} lines in all")
    lines: dict[int, str] = {}
    for key, text in value.items():
        here = f"{where}[{_short(key)}]"
        if not _LINE_KEY.match(key):
            raise SourcesError(f"{here}: a line number is a whole number from 1")
        if not isinstance(text, str):
            raise SourcesError(f"{here}: expected the line's text, not {_short(text)}")
        if len(text) > MAX_LINE_CHARS:
            raise SourcesError(f"{here}: {len(text):,} characters (at most {MAX_LINE_CHARS})")
        if any(c in text for c in "\r\n\x00"):
            raise SourcesError(f"{here}: one line, without line breaks")
        lines[int(key)] = text
    return lines


def _file(i: int, value: object, budget: int) -> SentFile:
    where = f"files[{i}]"
    found = _fields(where, value, ("path", "lines"), {"path", "lines"})
    path = found["path"]
    if not isinstance(path, str) or not path:
        raise SourcesError(f"{where}.path: expected the file's path, not {_short(path)}")
    if len(path) > MAX_PATH_CHARS or _CONTROL.search(path):
        raise SourcesError(f"{where}.path: at most {MAX_PATH_CHARS} printable characters")
    return SentFile(path, _lines(f"{where}.lines", found["lines"], budget))


def parse_sources(data: bytes) -> SentSources:
    """A sources document, checked: SourcesError naming the field when it is unusable."""
    if len(data) > MAX_SOURCES_BYTES:
        raise SourcesError(f"the document is over {MAX_SOURCES_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SourcesError("the document is not UTF-8 text") from None
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise SourcesError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    top = _fields("", raw, ("format", "artifact", "files"), {"format", "artifact", "cut", "files"})
    if top["format"] != SOURCES_FORMAT:
        raise SourcesError(f"format: expected {SOURCES_FORMAT!r}, not {_short(top['format'])}")
    artifact = top["artifact"]
    if not isinstance(artifact, str) or not _SHA256.match(artifact):
        raise SourcesError("artifact: the SHA-256 of the .jaxexport (64 hex digits)")
    cut = top.get("cut", False)
    if not isinstance(cut, bool):
        raise SourcesError(f"cut: true or false, not {_short(cut)}")
    listed = top["files"]
    if not isinstance(listed, list):
        raise SourcesError(f"files: expected a list, not {_short(listed)}")
    if len(listed) > MAX_FILES:
        raise SourcesError(f"files: {len(listed)} files (at most {MAX_FILES})")
    files: list[SentFile] = []
    budget = MAX_LINES
    for i, value in enumerate(listed):
        sent = _file(i, value, budget)
        if any(f.path == sent.path for f in files):
            raise SourcesError(f"files[{i}].path: {_short(sent.path)} is listed twice")
        budget -= len(sent.lines)
        files.append(sent)
    return SentSources(artifact, tuple(files), cut)
