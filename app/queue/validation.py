"""Whether a job may be queued: the wire contract, the target rules, the catalog's
parameters, the path, the stages and the sample count, each problem named by its field.

No FastAPI and no store here: the reader checks each card's job with the same function
when it loads its content, before the API is built (app.reader.content). Routes turn a
refusal into a 422 (app.queue.submission.field_errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.web.problems import problem_detail, pydantic_problems
from workers.catalog import WORKLOADS, CatalogError, allowed_range, check_peak, parse_params
from workers.catalog.kernels import pallas_refusal
from workers.catalog.target_rules import apply_target, byte_cap, job_kernel
from workers.protocol import MAX_SAMPLES, Dumps, JobSpec
from workers.protocol.dumps import default_dumps


class JobRefused(ValueError):
    """A job the checks refuse; `problems` names each one as (field, message)."""

    def __init__(self, problems: list[tuple[str | None, str]]) -> None:
        # A message that names its field already ("target: …") is not prefixed twice.
        super().__init__(
            "; ".join(
                message if message.startswith(f"{field}: ") else f"{field}: {message}"
                for field, message in problems
            )
        )
        self.problems = problems

    def detail(self) -> list[dict[str, str | None]]:
        """The problems as a 422 lists them: [{"field", "message"}], each clipped."""
        return problem_detail(self.problems)


@dataclass(frozen=True)
class ValidJob:
    """A submission that passed every check, with the devices its parameters span."""

    spec: JobSpec
    devices: int


def _with_range(message: str, model: Any, field: str | None) -> str:
    """`message`, and the parameter's declared range when it has one ("1 ≤ m ≤ 16384")."""
    name = (field or "").removeprefix("params.").split(".", 1)[0]
    declared = allowed_range(model, name) if name and name in model.model_fields else None
    return f"{message} (allowed: {declared})" if declared else message


def _param_problems(cls: Any, params: dict[str, Any]) -> list[tuple[str | None, str]]:
    """Every bad parameter of a workload, in plain words, each with its allowed range."""
    try:
        cls.model_validate(params)
    except ValidationError as exc:
        return [
            (field, _with_range(message, cls, field))
            for field, message in pydantic_problems(exc, "params.")
        ]
    return []


def validate_job(data: Any, max_job_bytes: int) -> ValidJob:
    """Check a parsed submission against the protocol and the catalog; JobRefused names
    every problem found."""
    if not isinstance(data, dict):
        raise JobRefused([("body", "expected a JSON object")])
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        # The parameters' problems too, so that a bad sample count does not hide them
        # until the next attempt (the run form shows every field's problem at once).
        params, name = data.get("params"), data.get("workload")
        known = WORKLOADS.get(name) if isinstance(name, str) else None
        extra = _param_problems(known, params) if known and isinstance(params, dict) else []
        raise JobRefused([*pydantic_problems(exc), *extra]) from None
    refused = pallas_refusal(spec.workload, spec.params)
    if refused is not None:  # Pallas asked of a workload without a kernel: say which have one
        raise JobRefused([refused])
    cls_or_none = WORKLOADS.get(spec.workload)
    if cls_or_none is not None:
        # Every bad parameter at once, in plain words, each with its whole allowed range.
        problems_now = _param_problems(cls_or_none, spec.params)
        if problems_now:
            raise JobRefused(problems_now)
    try:
        # A target's pairing with the path and workload, and its device count (which a
        # scale workload's `devices` defaults to), before the parameters are parsed.
        spec = apply_target(spec)
        params = parse_params(spec.workload, spec.params, byte_cap(spec, max_job_bytes))
        if spec.path in WORKLOADS[spec.workload].paths:
            job_kernel(spec, params)  # kernel=pallas: its compiler, block sizes and limits
        # Its estimated peak memory (inputs, outputs, float64 references, a sweep's every
        # size) against the cap, as the worker will check it again.
        check_peak(params, spec, byte_cap(spec, max_job_bytes))
    except CatalogError as exc:
        raise JobRefused([(exc.field, str(exc))]) from None
    cls = WORKLOADS[spec.workload]
    problems: list[tuple[str | None, str]] = []
    if spec.path not in cls.paths:
        offered = ", ".join(p.value for p in cls.paths)
        problems.append(
            ("path", f"{spec.workload} does not run on {spec.path} (offers: {offered})")
        )
    for stage in spec.stages:
        if stage not in cls.stages:
            offered = ", ".join(s.value for s in cls.stages)
            problems.append(("stages", f"{spec.workload} has no {stage} stage (offers: {offered})"))
    if len(set(spec.stages)) != len(spec.stages):
        problems.append(("stages", "a stage is named twice"))
    samples = spec.measure.samples
    if isinstance(samples, int) and not 1 <= samples <= MAX_SAMPLES:
        problems.append(("measure.samples", f"out of range (allowed: ge=1, le={MAX_SAMPLES})"))
    if spec.dumps is Dumps.ONLY:
        problems.append(
            (
                "dumps",
                "'only' is the server's own follow-up of a run that went first; ask 'later' "
                "(the run first, its dumps after) or 'inline' (the run waits for them)",
            )
        )
    if problems:
        raise JobRefused(problems)
    if "dumps" not in data:  # the run first wherever its dumps would make it wait
        spec = spec.model_copy(update={"dumps": default_dumps(spec)})
    return ValidJob(spec, params.devices())
