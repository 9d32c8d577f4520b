"""The comparison's context: one dict that the page, its htmx fragment and /compare.json
all render, built from the same job JSON the API returns (`job_public`)."""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

from app.dispatch import Dispatcher
from app.ir.diff import ir_diff
from app.pages.charts import Chart
from app.pages.compare.guard import Guarded, RunFacts, guard, run_facts
from app.pages.compare.plot import RunSamples, distributions_svg
from app.pages.compare.stats import MIN_RUNS, noise_floor, ratio_interval, verdict
from app.pages.matrices import compile_facts
from app.pages.runs.memory_fit import memory_fit
from app.pages.runs.plots import format_seconds
from app.routes.api import job_public

MAX_RUNS_PER_SIDE = 12
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DIFFABLE: tuple[str, ...] = ("ptx", "hlo", "stablehlo", "sass", "jaxpr")
"""Artifacts a diff may show, in the order one is chosen by default."""


class CompareInputError(ValueError):
    """A query field is wrong; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Request:
    """What the user asked to compare."""

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


def read_request(  # noqa: PLR0917 - one argument per query field
    a: str | None,
    b: str | None,
    runs: str | None,
    boundary: str | None = None,
    subject_a: str | None = None,
    subject_b: str | None = None,
    ir: str | None = None,
) -> Request:
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
    return Request(a_ids, b_ids, boundary or None, subject_a or None, subject_b or None, ir)


def _jobs(dispatcher: Dispatcher, side: str, ids: list[str]) -> list[dict[str, Any]]:
    jobs = []
    for job_id in ids:
        row = dispatcher.store.get_job(job_id)
        if row is None:
            raise CompareInputError(side, f"no run {job_id!r}")
        jobs.append(job_public(row, dispatcher))
    return jobs


def _measurement(job: dict[str, Any], boundary: str | None, subject: str | None) -> Any:
    for m in (job.get("run") or {}).get("measurements") or []:
        if m.get("boundary") == boundary and m.get("subject") == subject:
            return m
    return None


def _median(m: dict[str, Any]) -> float | None:
    stats = m.get("stats")
    if stats and stats.get("median"):
        return float(stats["median"])
    samples = m.get("samples_s") or []
    return float(statistics.median(samples)) if samples else None


def _side(
    name: str,
    jobs: list[dict[str, Any]],
    facts: list[RunFacts],
    boundary: str | None,
    subject: str | None,
) -> dict[str, Any]:
    """One side's runs with their medians, and how many repeats it still lacks."""
    runs = []
    for job, f in zip(jobs, facts, strict=True):
        m = _measurement(job, boundary, subject) if f.status == "done" and f.valid else None
        median = _median(m) if m else None
        run = job.get("run") or {}
        env = run.get("environment") or {}
        runs.append(
            {
                "id": job["id"],
                "status": job["status"],
                "valid": f.valid,
                "median_s": median,
                "median": format_seconds(median) if median else None,
                "samples": len(m.get("samples_s") or []) if m else 0,
                "samples_s": (m.get("samples_s") or []) if m else [],
                "stage_seconds": run.get("stage_seconds") or {},
                "worker_id": run.get("worker_id"),
                "host": env.get("hostname"),
                "device": f.experimental["device"],
                "link": f"/runs/{job['id']}",
                "environment": env,
                "correctness": run.get("correctness"),
                "flops": (run.get("rates") or {}).get("flops"),
            }
        )
    usable = [r for r in runs if r["median_s"]]
    pending = [r for r in runs if r["status"] in ("queued", "running")]
    return {
        "name": name,
        "runs": runs,
        "usable": len(usable),
        "pending": len(pending),
        "lacking": max(0, MIN_RUNS - len(usable) - len(pending)),
        "medians": [r["median_s"] for r in usable],
        "boundary": boundary,
        "subject": subject,
        "workload": jobs[0]["workload"],
        "path": jobs[0]["path"],
        "params": jobs[0].get("params") or {},
        "experimental": facts[0].experimental,
    }


def _stage_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for stage in ("trace", "lower", "compile", "warm_up"):
        values = []
        for side in (a, b):
            seen = [
                float(r["stage_seconds"][stage])
                for r in side["runs"]
                if r["status"] == "done" and r["stage_seconds"].get(stage) is not None
            ]
            values.append(statistics.median(seen) if seen else None)
        if any(v is not None for v in values):
            rows.append(
                {
                    "stage": stage,
                    "a_s": values[0],
                    "b_s": values[1],
                    "a": format_seconds(values[0]) if values[0] is not None else "—",
                    "b": format_seconds(values[1]) if values[1] is not None else "—",
                }
            )
    return rows


def _result(g: Guarded, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The ratio with its interval, or why there is none."""
    if g.compile_only and g.comparable:
        return {
            "ratio": None,
            "reason": (
                "Both sides only compiled: nothing executed on either target, so no "
                "execution ratio exists. The compiler's output is compared below."
            ),
        }
    if not g.comparable:
        return {
            "ratio": None,
            "reason": (
                "The sides differ in a controlled variable, or a run cannot be used (see above)."
            ),
        }
    short = [s["name"] for s in (a, b) if len(s["medians"]) < MIN_RUNS]
    if short:
        return {
            "ratio": None,
            "reason": (
                f"A ratio needs at least {MIN_RUNS} finished, valid runs a side; "
                f"{'sides A and B have' if len(short) == 2 else f'side {short[0]} has'} fewer. "
                "Queue the missing repeats below."
            ),
        }
    interval = ratio_interval(a["medians"], b["medians"])
    floors = {s["name"]: noise_floor(s["medians"]) for s in (a, b)}
    return {
        "ratio": interval.ratio,
        "low": interval.low,
        "high": interval.high,
        "level": interval.level,
        "resamples": interval.resamples,
        "no_difference": interval.includes_one,
        "verdict": verdict(interval),
        "noise_floor": {
            name: {"low": f.low, "high": f.high, "half_width_pct": f.half_width_pct}
            for name, f in floors.items()
        },
        "over": f"{len(a['medians'])} runs of A and {len(b['medians'])} of B (one median each)",
    }


def _diff(
    dispatcher: Dispatcher, a_id: str, b_id: str, wanted: str | None
) -> dict[str, Any] | None:
    store = dispatcher.store
    run_a, run_b = store.get_run(a_id), store.get_run(b_id)
    have_a = set(run_a.artifact_names if run_a else [])
    have_b = set(run_b.artifact_names if run_b else [])
    both = [n for n in DIFFABLE if n in have_a and n in have_b]
    if not both:
        return None
    name = wanted if wanted in both else both[0]
    text_a = (store.get_artifact(a_id, name) or ("", False))[0]
    text_b = (store.get_artifact(b_id, name) or ("", False))[0]
    found = ir_diff(name, text_a, text_b, strip_metadata=name in ("hlo", "stablehlo", "jaxpr"))
    return {**asdict(found), "a": a_id, "b": b_id, "offered": both}


def compare_context(dispatcher: Dispatcher, req: Request) -> dict[str, Any]:
    """Everything the comparison shows; JSON-ready except the `html` entry."""
    jobs_a = _jobs(dispatcher, "a", req.a)
    jobs_b = _jobs(dispatcher, "b", req.b)
    ctx: dict[str, Any] = {"request": asdict(req), "links": _links(req), "html": {}}
    if not jobs_b:
        ctx["picker"] = picker(dispatcher, jobs_a[0]["id"], req.a)
        facts = [run_facts(j, req.subject_a) for j in jobs_a]
        boundary = req.boundary or facts[0].default_boundary
        ctx["sides"] = {"a": _side("A", jobs_a, facts, boundary, facts[0].subject), "b": None}
        return ctx
    facts_a = [run_facts(j, req.subject_a) for j in jobs_a]
    facts_b = [run_facts(j, req.subject_b) for j in jobs_b]
    g = guard(facts_a, facts_b, req.boundary)
    a = _side("A", jobs_a, facts_a, g.boundary_a, g.subject_a)
    b = _side("B", jobs_b, facts_b, g.boundary_b, g.subject_b)
    ctx["sides"] = {"a": a, "b": b}
    ctx["guard"] = {
        "comparable": g.comparable,
        "boundary_a": g.boundary_a,
        "boundary_b": g.boundary_b,
        "controlled": g.controlled,
        "experimental": [{"variable": v, "a": x, "b": y} for v, x, y in g.experimental],
        "mismatches": [asdict(m) for m in g.mismatches],
        "problems": g.problems,
        "warnings": g.warnings,
        "suggest": f"/compare?{req.query(boundary=g.suggest_boundary)}"
        if g.suggest_boundary
        else None,
    }
    ctx["compile_only"] = g.compile_only
    if g.compile_only:
        ctx["compiled"] = [compiled_side(s["name"], j[0]) for s, j in ((a, jobs_a), (b, jobs_b))]
    ctx["verdict"] = page_verdict(g)
    ctx["result"] = _result(g, a, b)
    ctx["stages"] = _stage_rows(a, b)
    ctx["diff"] = _diff(dispatcher, jobs_a[0]["id"], jobs_b[0]["id"], req.ir)
    if ctx["diff"] is not None:
        ctx["diff"]["links"] = {n: f"/compare?{req.query(ir=n)}" for n in ctx["diff"]["offered"]}
    samples = [
        RunSamples(side["name"], r["id"], r["samples_s"], r["median_s"])
        for side in (a, b)
        for r in side["runs"]
        if r["median_s"]
    ]
    ctx["html"]["distributions"] = distributions_svg(samples, g.boundary_a or "?")  # a Chart
    return ctx


def compiled_side(name: str, job: dict[str, Any]) -> dict[str, Any]:
    """One side of a compile-only comparison: what XLA chose, memory per device against
    the target's HBM, and this host's compile time."""
    run = job.get("run") or {}
    summary = run.get("hlo_summary") or {}
    target = run.get("target") or {}
    facts = compile_facts(run)
    compile_s = (run.get("stage_seconds") or {}).get("compile")
    return {
        "name": name,
        "id": job["id"],
        "target": job.get("target") or f"host ({job['path']})",
        "compiler": " ".join(
            str(x) for x in (target.get("compiler"), target.get("compiler_version")) if x
        )
        or None,
        "deviceless": target.get("deviceless"),
        "fusions": [f"{f['name']} ({f['kind']})" for f in summary.get("fusions") or []],
        "library_calls": [
            f"{c['target']}" + (f" ({c['library']})" if c.get("library") else "")
            for c in summary.get("custom_calls") or []
        ],
        "collectives": [
            f"{c['kind']} {c.get('shape') or ''} groups {c.get('replica_groups') or '—'}".strip()
            for c in summary.get("collectives") or []
        ],
        "collective_summary": facts["collectives"],
        "compile_s": compile_s,
        "compile": format_seconds(compile_s) if compile_s is not None else "—",
        "memory_fit": memory_fit(
            target.get("memory"),
            str(target.get("model") or ""),
            int(target.get("count") or 1),
            chart_id=f"memory-bars-{name}",
        ),
        "host_memory": (run.get("memory_analysis") or {}).get("peak_bytes"),
    }


def page_verdict(g: Guarded) -> dict[str, str]:
    """The comparison's one verdict and headline; the page says nothing that contradicts it."""
    names = [v for v, _, _ in g.experimental]
    if not g.comparable:
        return {"kind": "refused", "headline": "Not comparable: no ratio is printed"}
    if not names:
        return {
            "kind": "a/a",
            "headline": "A/A comparison: the same configuration on both sides, a check of "
            "the noise",
        }
    if g.warnings:
        return {
            "kind": "several",
            "headline": f"More than one variable changed ({', '.join(names)}): a difference "
            "cannot be pinned on one",
        }
    return {
        "kind": "one",
        "headline": f"Like with like: one variable changed ({' and with it '.join(names)})",
    }


def _links(req: Request) -> dict[str, str]:
    query = req.query()
    return {
        "self": f"/compare?{query}",
        "json": f"/compare.json?{query}",
        "decision_md": f"/compare/decision.md?{query}",
        "decision_json": f"/compare/decision.json?{query}",
    }


def picker(
    dispatcher: Dispatcher, job_id: str, on_a_side: list[str], limit: int = 30
) -> list[dict[str, Any]]:
    """Recent finished, timed runs of the same workload as `job_id` and not already on a
    side, for choosing side B; a run with exactly its job spec on the same kind of device
    is marked as a repeat. Compile-only runs have no time, so they are no timing side; for
    a compile-only run, the picker lists the other compile-only runs (other targets)."""
    job = dispatcher.store.get_job(job_id)
    if job is None:
        return []
    my_facts = run_facts(job_public(job, dispatcher))
    mine = my_facts.experimental
    rows, _ = dispatcher.store.list_jobs(
        workload=job.workload, status="done", limit=limit + len(on_a_side)
    )
    found = []
    for r in rows:
        if r.id == job.id or r.id in on_a_side:
            continue
        public = job_public(r, dispatcher)
        facts = run_facts(public)
        if my_facts.compile_only:
            if not facts.compile_only:
                continue  # a compile-only run sets its compiler output against another's
        elif not (public.get("run") or {}).get("measurements"):
            continue
        theirs = facts.experimental
        found.append(
            {
                "id": r.id,
                "path": r.path,
                "device": facts.target if my_facts.compile_only else theirs["device"],
                "params": r.spec.get("params", {}),
                "mode": (r.spec.get("measure") or {}).get("mode", "latency"),
                "repeat": r.spec == job.spec and theirs == mine,
            }
        )
    return found[:limit]


def json_twin(ctx: dict[str, Any]) -> dict[str, Any]:
    """The context without its rendered HTML and pictures, for /compare.json."""
    twin: dict[str, Any] = _without_charts({k: v for k, v in ctx.items() if k != "html"})
    return twin


def _without_charts(value: Any) -> Any:
    """A JSON-able copy: pictures (`Chart`) are page-only, so the twin leaves them out."""
    if isinstance(value, dict):
        return {k: _without_charts(v) for k, v in value.items() if not isinstance(v, Chart)}
    if isinstance(value, list):
        return [_without_charts(v) for v in value]
    return value
