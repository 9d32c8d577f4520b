"""The server's half of the result gate: nothing a worker posts is stored on trust.

A posted run is first checked against the job its lease carries (`lease_problems`: the
workload, path, target, stages, measurement options and parameters after validation and
defaults must be the leased job's; each measurement's boundary must be one its mode
reports, its samples within what the job takes, finite and above zero; `extra.cuda` of
its documented types; or the report is refused naming the field), then passed through
the same rules as the publish step (`workers.protocol.gate.gate`, one implementation for
both halves): validity re-derived from its own verdict, a run that is not valid or that
ran nothing stripped of every speed-bearing field, and every statistic and rate of a
valid one worked out again from its samples. What the gate returns is all
the server stores and all that any page, download or API answer reads.

`prepare` also caps each artifact and explains the optimized HLO from the text already
cut to the artifact cap, so its cost is bounded by the cap, not by what a worker sends.
It touches no shared state, so the result route runs it off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.dispatch.core import cap_text
from app.ir.explain import explain
from app.ir.pipeline import (
    KERNEL_PIPELINES_ARTIFACT,
    PIPELINE_ARTIFACT,
    split_kernel_pipelines,
    split_pipeline,
)
from workers.catalog import CatalogError, may_go_unchecked, parse_params
from workers.catalog.kernels import public_params
from workers.catalog.target_rules import apply_target
from workers.protocol import ARTIFACT_NAMES, JobSpec, RunResult
from workers.protocol.gate import gate, lease_mismatches

NO_BYTE_CAP = 2**62
"""The lease check parses parameters only to fill in defaults; the job's byte cap was
checked when it was queued."""


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


def leased_job(spec: dict[str, object]) -> tuple[JobSpec, dict[str, object]]:
    """The stored job as its runner sees it (its target's defaults applied) and its
    parameters after validation and defaults, as JSON."""
    job = JobSpec.model_validate(spec)
    try:
        job = apply_target(job)
        parsed = parse_params(job.workload, job.params, NO_BYTE_CAP)
        params = public_params(parsed, job.path.value)  # as a runner publishes them
    except CatalogError:  # admitted once, so this does not happen; compare as stored
        params = dict(job.params)
    return job, params


def lease_problems(spec: dict[str, object], result: RunResult) -> list[tuple[str, str]]:
    """(field, message) for each way `result` is not the job `spec` that was leased."""
    job, params = leased_job(spec)
    return lease_mismatches(result, job, params)


def prepare(
    result: RunResult, *, artifact_max_bytes: int, inline_bytes: int, pipeline_max_bytes: int
) -> Prepared:
    """`result` through the gate, its artifacts capped, its HLO explained from the capped
    text and its pass pipeline split off for storing apart."""
    run = gate(result, may_be_unchecked=may_go_unchecked(result.job.workload, result.params))
    # What the server adds is the server's alone: nothing a worker sends under these names.
    run = run.model_copy(update={"hlo_explained": None, "ceilings": None})
    prepared = Prepared(run)
    inline: dict[str, str | None] = {}
    for name in ARTIFACT_NAMES:
        text = getattr(run.artifacts, name)
        if text is None:
            inline[name] = None
            continue
        prepared.artifacts[name] = cap_text(text, artifact_max_bytes)
        inline[name], cut = cap_text(text, inline_bytes)
        if cut:
            prepared.truncated.append(name)
    capped = run.model_copy(update={"artifacts": run.artifacts.model_copy(update=inline)})
    hlo = prepared.artifacts.get("hlo")
    if hlo is not None and hlo[0]:  # the summary that explains itself, from the run's own texts
        explained = explain(hlo[0], run.source, run.pipeline)
        capped = capped.model_copy(update={"hlo_explained": explained})
    if run.pipeline is not None:  # stored apart: the run's JSON keeps only the steps
        stored, capped = split_pipeline(capped, pipeline_max_bytes)
        if stored is not None:
            prepared.artifacts[PIPELINE_ARTIFACT] = (stored, False)
    kernels, capped = split_kernel_pipelines(capped, pipeline_max_bytes)
    if kernels is not None:  # each Pallas kernel's own passes, stored apart the same way
        prepared.artifacts[KERNEL_PIPELINES_ARTIFACT] = (kernels, False)
    prepared.run = capped
    return prepared
