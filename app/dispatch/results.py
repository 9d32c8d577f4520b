"""The server's half of the result gate: nothing a worker posts is stored on trust.

A posted run is first checked against the job its lease carries and the worker that
registered (`lease_problems`: the checked rules of `workers.catalog.result_rules`, each
refusing the report naming its field), then emptied of the server's own fields and passed
through the same rules as the publish step (`workers.catalog.published`, one
implementation for both halves): every field by its rule, validity re-derived from its own
verdict, a run that is not valid or that ran nothing stripped of every speed-bearing
field, and every statistic and rate of a valid one worked out again from its samples. What
the gate returns is all the server stores and all that any page, download or API answer
reads.

`prepare` also caps each artifact and explains the optimized HLO from the text already
cut to the artifact cap, so its cost is bounded by the cap, not by what a worker sends.
It touches no shared state, so the result route runs it off the event loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.dispatch.core import cap_text
from app.ir.device_ops import with_estimates
from app.ir.explain import explain
from app.ir.pipeline import (
    KERNEL_PIPELINES_ARTIFACT,
    PIPELINE_ARTIFACT,
    split_kernel_pipelines,
    split_pipeline,
)
from app.store import Store
from workers.catalog.jaxexport import ArtifactError, ExportHeader, read_header
from workers.catalog.published import published, refusals, without_server_fields
from workers.catalog.rule_checks import Lease
from workers.protocol import ARTIFACT_NAMES, Capabilities, InputInfo, RunResult
from workers.protocol.hlo import HloSyntaxError, read_hlo
from workers.protocol.hlo_summary import summarize

logger = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A gated run, ready for storing: the run's JSON with artifacts cut for inline use,
    and the stored artifacts (text, cut at the storage cap) beside it."""

    run: RunResult
    artifacts: dict[str, tuple[str, bool]] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.run.valid


def lease_problems(
    spec: dict[str, object], result: RunResult, header: ExportHeader | None = None
) -> list[tuple[str, str]]:
    """(field, message) for each way `result` is not the job `spec` that was leased (or,
    for an upload, the program its `header` declares): the checked rules refused with 422."""
    return _refused(spec, result, header, None).get(422, [])


def environment_problems(result: RunResult, caps: Capabilities) -> list[tuple[str, str]]:
    """(field, message) for each way `result` is not what its worker registered (its
    platform, device kind and count, a group's devices): the checked rules refused with 409."""
    return _refused(None, result, None, caps).get(409, [])


def _refused(
    spec: dict[str, object] | None,
    result: RunResult,
    header: ExportHeader | None,
    caps: Capabilities | None,
) -> dict[int, list[tuple[str, str]]]:
    leased = dict(spec) if spec is not None else None
    return refusals(result, Lease(leased, caps, result_dtypes(header)))


def result_dtypes(header: ExportHeader | None) -> dict[str, str] | None:
    """An uploaded program's result dtypes by result name, from its header."""
    return {name: aval.dtype for name, aval in header.results()} if header else None


def artifact_header(store: Store, run: RunResult) -> ExportHeader | None:
    """An uploaded program's own header (its arguments and results, each with its dtype
    and shape), or None for a catalog workload or an artifact no longer stored."""
    sha = run.params.get("artifact") if run.job.workload == "exported" else None
    found = store.open_file(sha) if isinstance(sha, str) and len(sha) == 64 else None
    if found is None:
        return None
    try:
        with found:
            return read_header(found)
    except (ArtifactError, OSError):
        return None


def _from_header(run: RunResult, header: ExportHeader) -> RunResult:
    """`run` with its inputs as the artifact declares them (names, shapes, dtypes)."""
    try:
        inputs = [
            InputInfo(name=name, shape=aval.dims(run.job.params.get("dims")), dtype=aval.dtype)
            for name, aval in header.arguments()
        ]
    except ArtifactError:  # a symbolic dimension without a value: the worker's shapes stand
        return run
    return run.model_copy(update={"inputs": inputs})


def prepare(
    result: RunResult,
    *,
    artifact_max_bytes: int,
    inline_bytes: int,
    pipeline_max_bytes: int,
    header: ExportHeader | None = None,
) -> Prepared:
    """`result` with every figure by its rule (`workers.catalog.published`: recomputed,
    bounded or withheld, valid only where the worker and the server's checks agree), its
    artifacts capped, its HLO summary worked out again and explained from the capped text,
    and its pass pipeline split off for storing apart. `header`: an uploaded program's own
    header, which names its inputs and each result's dtype (and so its tolerance)."""
    if header is not None:
        result = _from_header(result, header)
    # What the server adds is the server's alone: nothing a worker sends under these names.
    result = without_server_fields(result)
    run = published(result, worker_valid=result.valid, result_dtypes=result_dtypes(header))
    run = run.model_copy(update={"hlo_summary": None})  # worked out again from the stored HLO
    prepared = Prepared(run)
    inline: dict[str, str | None] = {}
    for name in ARTIFACT_NAMES:
        text = getattr(run.artifacts, name)
        if text is None:
            inline[name] = None
            continue
        kept, cut_here = cap_text(text, artifact_max_bytes)
        # Cut by the worker (to exactly the cap, so it looks whole here) or here: either way
        # the stored text is the beginning of the whole, and says so.
        prepared.artifacts[name] = (kept, cut_here or name in run.artifacts_cut)
        inline[name], cut = cap_text(text, inline_bytes)
        if cut:
            prepared.truncated.append(name)
    stored_cut = [n for n in ARTIFACT_NAMES if n in prepared.artifacts and prepared.artifacts[n][1]]
    capped = run.model_copy(
        update={
            "artifacts": run.artifacts.model_copy(update=inline),
            "artifacts_cut": stored_cut,
        }
    )
    hlo = prepared.artifacts.get("hlo")
    if hlo is not None and hlo[0]:  # the summary that explains itself, from the run's own texts
        capped = _summarized(capped, hlo, run)
    if run.pipeline is not None:  # stored apart: the run's JSON keeps only the steps
        stored, capped = split_pipeline(capped, pipeline_max_bytes)
        if stored is not None:
            prepared.artifacts[PIPELINE_ARTIFACT] = (stored, False)
    kernels, capped = split_kernel_pipelines(capped, pipeline_max_bytes)
    if kernels is not None:  # each Pallas kernel's own passes, stored apart the same way
        prepared.artifacts[KERNEL_PIPELINES_ARTIFACT] = (kernels, False)
    prepared.run = capped
    return prepared


def _summarized(capped: RunResult, hlo: tuple[str, bool], run: RunResult) -> RunResult:
    """`capped` with the HLO summary and the explained instructions worked out from the
    stored (perhaps cut) optimized HLO; neither when that text does not parse."""
    try:
        module = read_hlo(hlo[0], cut=hlo[1])
    except HloSyntaxError as exc:
        logger.warning("a run's optimized HLO does not parse, so it has no summary: %s", exc)
        return capped
    explained = explain(module, hlo[0], run.source, run.pipeline)
    update: dict[str, Any] = {"hlo_explained": explained, "hlo_summary": summarize(module)}
    if capped.device_time is not None:  # a chip's instructions, with the compiler's estimates
        update["device_time"] = with_estimates(capped.device_time, module)
    return capped.model_copy(update=update)
