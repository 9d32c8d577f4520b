"""The HLO diff of two runs: `GET /api/v1/compare/hlo-diff?a=&b=` (JSON), and its full
listing at `/compare/hlo-diff?a=&b=` (a page, or its fragment for htmx). The compare
page's "What changed" section is the same report's top
(`app.pages.compare.hlo_section.changes_section`). Each report is worked out once, off the
event loop, and kept as its JSON (`app.pages.compare.hlo_diffs`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from app.deps import HloDiffsDep, StateDep
from app.pages.compare.hlo_changes import HloDiffMissing, HloDiffUnreadable
from app.pages.compare.hlo_diffs import HloDiffs
from app.pages.compare.hlo_section import section
from app.pages.jobs import PREFIX
from app.queue.submission import field_errors
from app.routes.common import is_htmx, render
from app.routes.routing import reads
from app.routes.schemas import MessagePublic

api_router = APIRouter(prefix=PREFIX, tags=["compare"])
page_router = APIRouter(include_in_schema=False)

JobId = Annotated[str, Query(min_length=1, max_length=64, description="A job id.")]


class HloCostPublic(BaseModel):
    cycles: int | None = Field(
        description="The compiler's own estimate, where its HLO states one (a TPU "
        "fusion's estimated_cycles)."
    )
    bytes: int | None = Field(
        description="Bytes of the operands and the result, from their shapes, per device."
    )


class HloFramePublic(BaseModel):
    file: str = Field(description="The file as the program names it.")
    line: int
    place: str = Field(description="The file's own name and the line: `mlp.py:21`.")


LABEL = Field(
    description="How its user names it: the source line and the JAX operation, "
    "`mlp.py:21 dot_general` (`(gradient)` for a backward pass's); null when the "
    "metadata names neither."
)


class HloInstrPublic(BaseModel):
    """One instruction, first as its user names it (source line, JAX operation), then as
    the compiler does: a fusion's kind (with a custom fusion's backend kind, e.g.
    kCustom/__triton_gemm) or a custom call's target is its `kind`."""

    label: str | None = LABEL
    jax_op: str | None = Field(description="The JAX operation: `dot_general`.")
    op_name: str | None = Field(description="Its metadata's op_name, whole.")
    source: HloFramePublic | None = Field(
        description="The innermost frame in the user's own files (outside installed packages)."
    )
    library: HloFramePublic | None = Field(
        description="The innermost frame inside an installed package, when the user's line "
        "called into one (a flax layer)."
    )
    name: str
    opcode: str = Field(description="An asynchronous start's opcode without -start.")
    kind: str | None
    library_kind: str | None = Field(
        description="The library behind a custom call or custom fusion: Triton, cuBLASLt…"
    )
    work: str = Field(
        description="What it does: gemm, reduction, kernel, collective, layout, tuple, "
        "parameter, constant or op."
    )
    computes: list[str] = Field(description="The JAX operations it computes (a fusion's body's).")
    shape: str
    line: int = Field(description="Its 1-based line in the run's HLO text (0: not found).")
    cost: HloCostPublic


class HloPairPublic(BaseModel):
    label: str | None = LABEL
    a: HloInstrPublic
    b: HloInstrPublic
    what: list[str] = Field(description="What differs, e.g. opcode, layout, fusion body.")
    step: str = Field(
        description="The matcher step that paired them: exact, structure, parameters, "
        "metadata, roots or propagation."
    )
    guess: bool = Field(
        description="Only a guess: the same JAX operation on the same line, but arrays of "
        "another size or kernels doing different work."
    )


class HloRegroupLines(BaseModel):
    a: list[int]
    b: list[int]


class HloRegroupParts(BaseModel):
    a: list[HloInstrPublic]
    b: list[HloInstrPublic]


class HloSplitPublic(BaseModel):
    label: str | None = LABEL
    a: str
    b: list[str]
    parts: HloRegroupParts
    lines: HloRegroupLines


class HloMergePublic(BaseModel):
    label: str | None = LABEL
    a: list[str]
    b: str
    parts: HloRegroupParts
    lines: HloRegroupLines


class HloCollectiveLines(BaseModel):
    a: int | None
    b: int | None


class HloCollectivePublic(BaseModel):
    label: str | None = LABEL
    a: str | None = Field(description="The collective in A; null when only B has it.")
    b: str | None
    kind: str
    bytes_a: int | None = Field(description="Bytes it delivers per device, from its shape.")
    bytes_b: int | None
    groups_a: str | None = Field(description="Its replica groups as the HLO spells them.")
    groups_b: str | None
    lines: HloCollectiveLines


class HloDiffSummary(BaseModel):
    identical: int
    changed: int
    only_a: int
    only_b: int
    splits: int
    merges: int
    guesses: int = Field(description="Changed pairs that are only guesses.")


class HloSides(BaseModel):
    a: bool
    b: bool


class HloCounts(BaseModel):
    a: int
    b: int


class HloCompilers(BaseModel):
    a: str
    b: str


class HloDiffPublic(BaseModel):
    """Two runs' optimized HLO paired instruction by instruction."""

    a: str
    b: str
    compilers: HloCompilers
    instructions: HloCounts = Field(description="Instructions paired on each side.")
    summary: HloDiffSummary
    sentences: list[str]
    changed: list[HloPairPublic]
    only_a: list[HloInstrPublic]
    only_b: list[HloInstrPublic]
    splits: list[HloSplitPublic]
    merges: list[HloMergePublic]
    collectives: list[HloCollectivePublic]
    truncated: HloSides = Field(
        description="Which side's HLO was cut at the storage cap (by the server, or by the "
        "worker that sent it): read to its last whole instruction and diffed as far as it "
        "goes."
    )


async def _report(diffs: HloDiffs, a: str, b: str, *, as_json: bool) -> Any:
    try:
        return await (diffs.report_json(a, b) if as_json else diffs.report(a, b))
    except HloDiffMissing as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    except HloDiffUnreadable as exc:  # named by its side, as every 422 names its field
        side = "a" if f"job {a!r}" in str(exc) else "b"
        field_errors([(side, str(exc))])


@reads(api_router)(
    "/compare/hlo-diff",
    response_model=HloDiffPublic,
    responses={
        404: {"model": MessagePublic, "description": "No such job, or no HLO."},
        422: {
            "description": "A query parameter is wrong (each named), or a side's HLO does not "
            "parse (the job and the line, in words).",
            "content": {
                "application/json": {
                    "schema": {
                        "anyOf": [
                            {"$ref": "#/components/schemas/ValidationErrorPublic"},
                            {"$ref": "#/components/schemas/MessagePublic"},
                        ]
                    }
                }
            },
        },
    },
    summary="Two runs' optimized HLO, paired instruction by instruction",
)
async def hlo_diff_json(a: JobId, b: JobId, diffs: HloDiffsDep) -> Response:
    """Job `a`'s optimized HLO against job `b`'s: identical and changed pairs (with what
    differs), what only one side has, fusions split or merged, and the collectives of
    both; cost as each side's HLO states it."""
    # The report as it is kept: its JSON, sent without being read back into objects.
    found = await _report(diffs, a, b, as_json=True)
    return Response(found, media_type="application/json")


@reads(page_router)("/compare/hlo-diff", response_class=HTMLResponse)
async def hlo_diff_page(
    request: Request, state: StateDep, diffs: HloDiffsDep, a: JobId, b: JobId
) -> HTMLResponse:
    """Every row of the HLO diff (the compare page shows each group's top)."""
    changes = section(await _report(diffs, a, b, as_json=False), None)
    template = "_compare_hlo_diff.html" if is_htmx(request) else "compare_hlo_diff.html"
    return render(state, template, {"changes": changes, "nav": "runs"})
