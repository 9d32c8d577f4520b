"""What a comparison asks for, read from the query string (`a=ID,ID&b=ID,ID`, or
`runs=A,B` for a plain pair), and how a wrong field is named."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlencode

MAX_RUNS_PER_SIDE = 12
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DIFFABLE: tuple[str, ...] = (
    "hlo",
    "ptx",
    "stablehlo",
    "sass",
    "mosaic",
    "triton",
    "mosaic_gpu",
    "jaxpr",
)
"""Artifacts a diff may show, in the order one is chosen by default: the optimized HLO
first (what the compiler decided; the machine code is a click away)."""


class CompareInputError(ValueError):
    """A query field is wrong; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Comparison:
    """What the user asked to compare: the runs on each side, the boundary and measurement
    subjects to read, and which IR to diff."""

    a: list[str]
    b: list[str]
    boundary: str | None = None
    subject_a: str | None = None
    subject_b: str | None = None
    ir: str | None = None

    def query(self, **changes: str | None) -> str:
        """This request as a query string, with `changes` applied."""
        fields: dict[str, str | None] = {
            "a": ",".join(self.a),
            "b": ",".join(self.b) or None,
            "boundary": self.boundary,
            "subject_a": self.subject_a,
            "subject_b": self.subject_b,
            "ir": self.ir,
            **changes,
        }
        return urlencode({k: v for k, v in fields.items() if v}, safe=",")


def _ids(field: str, text: str | None) -> list[str]:
    ids: list[str] = []
    for raw in (text or "").split(","):
        part = raw.strip()
        if not part:
            continue
        if not RUN_ID.match(part):
            raise CompareInputError(field, f"{part[:40]!r} is not a run id")
        if part not in ids:
            ids.append(part)
    if len(ids) > MAX_RUNS_PER_SIDE:
        raise CompareInputError(field, f"at most {MAX_RUNS_PER_SIDE} runs a side")
    return ids


def read_comparison(  # noqa: PLR0917 - one argument per query field
    a: str | None,
    b: str | None,
    runs: str | None,
    boundary: str | None = None,
    subject_a: str | None = None,
    subject_b: str | None = None,
    ir: str | None = None,
) -> Comparison:
    """The comparison the query asks for: a=ID,ID&b=ID,ID, or runs=A,B for a plain pair."""
    if runs:
        pair = _ids("runs", runs)
        if len(pair) != 2 or a or b:
            raise CompareInputError("runs", "give exactly two run ids (runs=A,B), or use a= and b=")
        a_ids, b_ids = pair[:1], pair[1:]
    else:
        a_ids, b_ids = _ids("a", a), _ids("b", b)
    if not a_ids:
        raise CompareInputError("a", "name at least one run (a=ID or runs=A,B)")
    if ir is not None and ir not in DIFFABLE:
        raise CompareInputError("ir", f"one of {', '.join(DIFFABLE)}")
    return Comparison(a_ids, b_ids, boundary or None, subject_a or None, subject_b or None, ir)
