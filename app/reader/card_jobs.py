"""A reader card's own example as a catalog job: its description, the form that queues it,
and its claims checked against what the real compiler produced. (Whether the catalog
takes the job is checked when the content loads: app.reader.content.)

The card's "compile this for real" button is an ordinary run form (POST /runs) with the
job's fields hidden in it, so it goes through the same checks and the one admission as
every other job, and works without JavaScript.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.reader.models import Card, CardJob, Content
from workers.catalog.kernels import kernel_reading
from workers.protocol.hlo import without_metadata


def describe(job: CardJob) -> str:
    """The job in one line, as `boundary run` would take it."""
    params = " ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in job.params.items()
    )
    return f"{job.workload} {params} --path {job.path.value} --target {job.target}".replace(
        "  ", " "
    )


def form_fields(job: CardJob) -> list[tuple[str, str]]:
    """The hidden fields of the card's run form, named as the run form names them."""
    fields = [
        ("workload", job.workload),
        ("path", job.path.value),
        ("target", job.target),
        ("stages", "compile"),
    ]
    for key, value in job.params.items():
        if isinstance(value, bool):
            if value:
                fields.append((f"param.{key}", "on"))
            continue
        fields.append((f"param.{key}", str(value)))
    return fields


@dataclass(frozen=True)
class ClaimCheck:
    """One claim of a card, and whether the run's output bears it out."""

    says: str
    artifact: str
    pattern: str
    absent: bool
    holds: bool | None
    """None when the run has no such artifact to check."""
    found: str | None
    """The instruction (or line) that carries the claim, quoted, when there is one."""


def check_claims(job: CardJob, artifacts: dict[str, str | None]) -> list[ClaimCheck]:
    """Each claim of `job` against the run's artifacts."""
    out = []
    for claim in job.claims:
        text = artifacts.get(claim.artifact)
        holds: bool | None = None
        found = None
        if text:
            match = re.search(claim.pattern, text)
            holds = (match is None) if claim.absent else (match is not None)
            if match is not None:
                found = quote_line(text, match.start())
        out.append(
            ClaimCheck(claim.says, claim.artifact, claim.pattern, claim.absent, holds, found)
        )
    return out


QUOTE_CHARS = 400


def quote_line(text: str, at: int) -> str:
    """The whole line of `text` that holds position `at` (an HLO instruction), without its
    source metadata, cut at QUOTE_CHARS: what a claim's evidence is quoted as."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = without_metadata(text[start : end if end >= 0 else len(text)]).strip()
    return line if len(line) <= QUOTE_CHARS else line[: QUOTE_CHARS - 1] + "…"


def _same(value: Any, other: Any) -> bool:
    return str(value).lower() == str(other).lower()


def card_for_job(content: Content, job: dict[str, Any]) -> tuple[Card, CardJob] | None:
    """The reader card one of whose examples `job` is (workload, path, target, every
    parameter the example sets, and the same kernel: XLA's or Pallas), and that example's
    job; or None."""
    params = job.get("params") or {}
    path = str(job.get("path"))
    for card in content.cards.values():
        for mine in card.examples():
            if (mine.workload, mine.path.value, mine.target) != (
                job.get("workload"),
                path,
                job.get("target"),
            ):
                continue
            if kernel_reading(path, mine.params.get("kernel")) != kernel_reading(
                path, params.get("kernel")
            ):
                continue
            if all(k in params and _same(v, params[k]) for k, v in mine.params.items()):
                return card, mine
    return None
