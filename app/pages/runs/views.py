"""Contexts for the run pages, built from the same job JSON the API returns.

`job_public()` (app.pages.jobs) is the one source: the page, its htmx fragments and
`/runs/{id}.json` all start from it, so they cannot disagree.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shlex
import statistics
from typing import Any, get_args

from pydantic import ValidationError

from app.pages.runs.chip import chip_view
from app.pages.runs.kernels_view import kernels_view
from app.pages.runs.memory import Reported, memory_view
from app.pages.runs.memory_fit import memory_fit
from app.pages.runs.placement import placement_view
from app.pages.runs.plots import NARROW_W, format_seconds, samples_svg
from app.pages.runs.profile import profile_view
from app.pages.runs.roofline import roofline_view
from app.pages.runs.sweep_plot import sweep_view
from workers.catalog import WORKLOADS
from workers.catalog.kernel_words import pallas_backend
from workers.catalog.kernels import PALLAS_FIELDS
from workers.protocol import (
    ARTIFACT_NAMES,
    FINAL_STATUSES,
    BoundaryId,
    JobStatus,
    Measurement,
    ProgressPhase,
    RunResult,
)
from workers.protocol.compiler_options import as_arguments, as_text
from workers.protocol.dumps import first_of

PHASES: tuple[str, ...] = tuple(p for p in get_args(ProgressPhase) if p != "failed")
"""The steps a job goes through, in order, as the progress panel lists them."""

BOUNDARY_NOTES: dict[str, str] = {
    BoundaryId.HOST_SYNC.value: "one call each; the timer stops when the result is ready",
    BoundaryId.HOST_THROUGHPUT.value: "K calls enqueued, one sync; per-call time",
    BoundaryId.HOST_DISPATCH.value: (
        "call to return without waiting: a teaching demo of asynchronous dispatch, "
        "NOT completion time and never a speed"
    ),
    BoundaryId.TRANSFER_IN.value: "host → device placement of the inputs",
    BoundaryId.APPLICATION.value: "transfer-in + call + transfer-out: the whole trip",
    BoundaryId.TRANSFER_OUT.value: "device → host copy of the output",
    BoundaryId.DEVICE_EVENTS.value: "CUDA event pair in one stream: device time only",
    BoundaryId.DEVICE_TIME.value: (
        "the program's span on the chip per call, from a profiled pass after these samples"
    ),
}

STAT_ROWS: tuple[str, ...] = ("min", "q1", "median", "mean", "q3", "max", "stddev", "iqr")

SHAPE_NOTES: dict[str, str] = {
    "bimodal": (
        "Bimodal: the samples fall into two clusters of times, so the median depends on how "
        "many landed in each. Look at the plot before trusting one figure."
    ),
    "drifting": (
        "Drifting: the times moved steadily one way while sampling (the machine or the "
        "device changed state), so their median describes no steady state."
    ),
}
"""What each shape means for the reader, beside the statistics it casts doubt on."""


def settling_text(m: Measurement) -> str | None:
    """What warm-up detection did to a measurement's samples, in the page's words."""
    if m.shape_checked is None:
        return None  # withheld, or from a worker that does not judge
    if not m.shape_checked:
        return (
            "Warm-up and shape not judged (it takes at least 10 samples, and a worker group "
            "samples in lockstep): no sample was discarded."
        )
    discarded = m.warmup_discarded or 0
    if discarded == 0:
        return "No warm-up transient: no sample was discarded before these."
    slower = ""
    if m.samples_s and m.warmup_samples_s and statistics.median(m.samples_s) > 0:
        ratio = statistics.median(m.warmup_samples_s) / statistics.median(m.samples_s)
        slower = f", about {ratio:.2g}× slower at their median,"
    return (
        f"Warm-up: the first {discarded} samples{slower} were discarded while the timings "
        f"settled; the statistics are of the {len(m.samples_s)} that followed."
    )


def command_value(value: Any) -> str:
    """A parameter's value as `boundary run` reads it back (`parse_value`): booleans as
    true/false, objects and lists (`input_rules`) as JSON, anything else as its text."""
    if isinstance(value, bool | dict | list):
        return json.dumps(value)
    return str(value)


def reproduce_command(job: dict[str, Any], server: str | None = None) -> str:
    """The exact `boundary run` command line for this job."""
    parts = ["boundary", "run", job["workload"]]
    for key, value in job.get("params", {}).items():
        parts.append(f"{key}={command_value(value)}")
    parts += ["--path", job["path"]]
    if job.get("target"):
        parts += ["--target", job["target"]]
    if job.get("stages"):
        parts += ["--stages", ",".join(job["stages"])]
    measure = job.get("measure") or {}
    stages = job.get("stages") or []
    # A compile-only job samples nothing: its sampling options would only mislead.
    timed = not stages or any(s != "compile" for s in stages)
    for option in ("mode", "samples", "cache") if timed else ("cache",):
        if option in measure:
            parts += [f"--{option}", str(measure[option])]
    parts += as_arguments(job.get("compiler_options") or {})
    if server:
        parts += ["--server", server]
    return shlex.join(parts)


def job_request(job: dict[str, Any]) -> str:
    """The job as the JSON a client would POST to /api/v1/jobs."""
    keys = ("workload", "path", "target", "params", "stages", "measure", "compiler_options")
    body = {k: job[k] for k in keys if job.get(k) is not None}
    return json.dumps(body, indent=2)


def measurement_view(m: Measurement, index: int, valid: bool) -> dict[str, Any]:
    stats = m.stats
    rows = []
    if stats is not None:
        rows = [(name, format_seconds(getattr(stats, name))) for name in STAT_ROWS]
    return {
        "boundary": m.boundary.value,
        "subject": m.subject,
        "note": BOUNDARY_NOTES.get(m.boundary.value, ""),
        "rounds": len(m.samples_s),
        "calls_per_sample": m.calls_per_sample,
        "stats": stats,
        "rows": rows,
        "median": format_seconds(stats.median) if stats else None,
        "outliers": stats.outliers if stats else None,
        "wide": bool(stats and stats.wide_spread),
        "stopped_because": m.stopped_because,
        "warmup_discarded": m.warmup_discarded,
        "settling": settling_text(m),
        "shape": m.shape,
        "shape_note": SHAPE_NOTES.get(m.shape or ""),
        "chart": samples_svg(m, title_id=f"samples-{index}") if valid and m.samples_s else None,
        "narrow_chart": (
            samples_svg(m, title_id=f"samples-{index}-narrow", width=NARROW_W)
            if valid and m.samples_s
            else None
        ),
        "dispatch_only": m.boundary == BoundaryId.HOST_DISPATCH,
        # A valid run may still withhold a measurement (a failed subject, Pallas interpret
        # mode): its note says why, in the place of the times.
        "withheld": m.note if stats is None and not m.samples_s and m.note else None,
    }


def _cuda_view(run: RunResult) -> dict[str, Any] | None:
    from app.pages.runs.cuda_view import cuda_view  # the cuda path's panel (None on other paths)

    return cuda_view(run)


def run_context(job: dict[str, Any], public_base: str = "") -> dict[str, Any]:
    """Everything the run page shows for one job (its run may be absent)."""
    status = JobStatus(job["status"])
    run_json = job.get("run")
    run: RunResult | None = RunResult.model_validate(run_json) if run_json else None
    ctx: dict[str, Any] = {
        "job": job,
        "status": status.value,
        "final": status in FINAL_STATUSES,
        "phases": PHASES,
        "progress": job.get("progress"),
        "run": run,
        "reproduce": reproduce_command(job),
        "reproduce_server": reproduce_command(job, public_base or "http://127.0.0.1:8000"),
        "job_request": job_request(job),
        "explain_by_bytes": False,  # the run page's ?explain=bytes sorts that table
        "memory": memory_view(Reported.from_run(job["id"], run)) if run is not None else None,
        "links": {
            "self": f"/runs/{job['id']}",
            "json": f"/runs/{job['id']}.json",
            "csv": f"/runs/{job['id']}/samples.csv",
            "api": job["links"]["self"],
        },
    }
    dumps = job.get("dumps")
    ctx["dumps"] = dumps if dumps and dumps.get("status") != JobStatus.DONE.value else None
    ctx["completes"] = first_of(job["id"])  # a follow-up: the run whose dumps it makes
    if run is not None:
        artifact_links = (run_json or {}).get("artifact_links", {})
        ctx.update(
            measurements=[
                measurement_view(m, i, run.valid) for i, m in enumerate(run.measurements)
            ],
            artifacts=[
                {
                    "name": name,
                    "size": len(getattr(run.artifacts, name) or ""),
                    "download": artifact_links.get(name),
                    "cut": name in run.artifacts_cut,
                }
                for name in ARTIFACT_NAMES
                if getattr(run.artifacts, name)
            ],
            truncated=(run_json or {}).get("artifacts_truncated", []),
            stage_rows=[
                (name, format_seconds(value))
                for name, value in run.stage_seconds.model_dump().items()
                if value is not None
            ],
            environment=run.environment.model_dump(mode="json"),
            cuda=_cuda_view(run),
            kernels=kernels_view(job["id"], run),
            roofline=roofline_view(run),
            chip=(chip := chip_view(run)),
            op_times={o.name: o for o in chip.ops} if chip is not None else {},
            sweep=sweep_view(run.sweep),
            profile=profile_view(job["id"], run_json or {}),
            compare_link=f"/compare?a={job['id']}",
            placement_view=placement_view(run),
            memory_fit=memory_fit(
                ((run_json or {}).get("target") or {}).get("memory"),
                run.target.model if run.target else "",
                run.target.count if run.target else 0,
                refused=run.target.refused if run.target else None,
            ),
        )
    return ctx


def filled_params(job: dict[str, Any]) -> dict[str, Any]:
    """A job's parameters with its workload's defaults filled in (as submitted when they
    do not validate)."""
    params: dict[str, Any] = dict(job.get("params") or {})
    cls = WORKLOADS.get(job.get("workload", ""))
    if cls is not None:
        with contextlib.suppress(ValidationError):  # else shown as submitted
            params = cls.model_validate(params).model_dump(mode="json", by_alias=True)
    return params


def shape_and_dtype(job: dict[str, Any]) -> tuple[str | None, str | None]:
    """What /runs shows of a job's parameters: its sizes ("k=64 m=64 n=64") and dtype,
    with the workload's defaults filled in for what the submission left out."""
    params = filled_params(job)
    sizes = [
        f"{k}={v}"
        for k, v in sorted(params.items())
        if isinstance(v, int) and not isinstance(v, bool) and not (k in PALLAS_FIELDS and not v)
    ]  # a Pallas block size of 0 is the default: not a size of the problem
    dtype = params.get("dtype")
    return (" ".join(sizes) or None), (str(dtype) if dtype else None)


def variant_of(job: dict[str, Any]) -> str | None:
    """What else sets two runs of one shape apart in /runs: a Pallas kernel in place of
    XLA's ("kernel=pallas (triton)"), a scale workload's sharding ("sharding=custom
    a_spec=x,- b_spec=-,x out_spec=-,x mesh=8") and the compiler options the job set."""
    params = filled_params(job)
    words = []
    backend = pallas_backend(str(job.get("path", "")), params)
    if backend is not None:
        words.append(f"kernel=pallas ({backend})")
    if "sharding" in params:
        keys = ["sharding", "devices", "mesh", "axes"]
        if params.get("sharding") == "custom":
            keys += ["a_spec", "b_spec", "out_spec"]
        words += [f"{k}={params[k]}" for k in keys if params.get(k) not in (None, "")]
    for key in ("kind", "over"):  # a collective's own choice
        if key in params and job.get("workload") == "collective":
            words.append(f"{key}={params[key]}")
    options = job.get("compiler_options")
    if options:
        words.append(as_text(options))
    completes = first_of(str(job.get("id", "")))
    if completes is not None:  # a follow-up job: the dumps of a run that went first
        words.append(f"dumps of {completes}")
    return " ".join(words) or None


def samples_csv(job: dict[str, Any]) -> str:
    """Every raw sample of a run: one row per sample, with its boundary and unit."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["job", "boundary", "index", "seconds", "calls_per_sample", "valid"])
    run = job.get("run")
    if run:
        for m in run.get("measurements", []):
            for i, value in enumerate(m["samples_s"]):
                writer.writerow(
                    [
                        job["id"],
                        m["boundary"],
                        i,
                        repr(value),
                        m.get("calls_per_sample", 1),
                        run.get("valid"),
                    ]
                )
    return out.getvalue()
