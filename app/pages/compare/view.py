"""The comparison's context: one dict that the page, its htmx fragment and /compare.json
all render, built from the same job JSON the API returns (`job_public`): the guard's
verdict, the ratio with its interval (or why there is none), the IR diff and links."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from app.dispatch import Dispatcher
from app.ir.diff import ir_diff
from app.ir.sources import MLIR_ARTIFACTS
from app.pages.charts import Chart
from app.pages.compare.guard import OPTIONS, Guarded, guard, run_facts
from app.pages.compare.memory_peaks import peaks_compared
from app.pages.compare.plot import RunSamples, distribution_panels
from app.pages.compare.request import DIFFABLE, Comparison
from app.pages.compare.sides import compiled_side, picker, side, side_jobs
from app.pages.compare.stages import stage_rows
from app.pages.compare.stats import MIN_RUNS, noise_floor, ratio_interval, verdict
from workers.protocol.compiler_options import NONE


def compare_context(dispatcher: Dispatcher, req: Comparison) -> dict[str, Any]:
    """Everything the comparison shows; JSON-ready except the `html` entry."""
    jobs_a = side_jobs(dispatcher, "a", req.a)
    jobs_b = side_jobs(dispatcher, "b", req.b)
    ctx: dict[str, Any] = {"request": asdict(req), "links": _links(req), "html": {}}
    if not jobs_b:
        ctx["picker"] = picker(dispatcher, jobs_a[0]["id"], req.a)
        facts = [run_facts(j, req.subject_a) for j in jobs_a]
        boundary = req.boundary or facts[0].default_boundary
        ctx["sides"] = {"a": side("A", jobs_a, facts, boundary, facts[0].subject), "b": None}
        return ctx
    facts_a = [run_facts(j, req.subject_a) for j in jobs_a]
    facts_b = [run_facts(j, req.subject_b) for j in jobs_b]
    g = guard(facts_a, facts_b, req.boundary)
    a = side("A", jobs_a, facts_a, g.boundary_a, g.subject_a)
    b = side("B", jobs_b, facts_b, g.boundary_b, g.subject_b)
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
        ctx["peaks"] = peaks_compared(jobs_a[0], jobs_b[0])
    ctx["verdict"] = page_verdict(g)
    ctx["result"] = _result(g, a, b)
    ctx["stages"] = stage_rows(a, b, g.comparable)
    ctx["diff"] = _diff(dispatcher, jobs_a[0]["id"], jobs_b[0]["id"], req.ir)
    if ctx["diff"] is not None:
        ctx["diff"]["links"] = {n: f"/compare?{req.query(ir=n)}" for n in ctx["diff"]["offered"]}
    samples = [
        RunSamples(side["name"], r["id"], r["samples_s"], r["median_s"])
        for side in (a, b)
        for r in side["runs"]
        if r["median_s"]
    ]
    ctx["html"]["distributions"] = distribution_panels(
        samples, g.comparable, g.boundary_a, g.boundary_b
    )
    return ctx


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
    waiting = a["pending"] + b["pending"]
    if short and waiting:
        return {
            "ratio": None,
            "reason": (
                f"Waiting for {waiting} repeat{'' if waiting == 1 else 's'} to finish: a "
                f"ratio needs at least {MIN_RUNS} finished, valid runs a side. This page "
                "refreshes itself."
            ),
        }
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
    stripped = name in ("hlo", "jaxpr", *MLIR_ARTIFACTS)
    found = ir_diff(name, text_a, text_b, strip_metadata=stripped)
    pipelines = "pipeline" in have_a and "pipeline" in have_b
    return {**asdict(found), "a": a_id, "b": b_id, "offered": both, "pipelines": pipelines}


def _named(variable: str, a: str, b: str) -> str:
    """An experimental variable as the headline names it: compiler options by their value
    ("compiler options: xla_gpu_enable_triton_gemm=false"), the rest by name."""
    if variable != OPTIONS:
        return variable
    if NONE in (a, b):
        return f"{variable}: {b if a == NONE else a}"
    return f"{variable}: {a} against {b}"


def page_verdict(g: Guarded) -> dict[str, str]:
    """The comparison's one verdict and headline; the page says nothing that contradicts it."""
    names = [_named(v, a, b) for v, a, b in g.experimental]
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


def _links(req: Comparison) -> dict[str, str]:
    query = req.query()
    return {
        "self": f"/compare?{query}",
        "json": f"/compare.json?{query}",
        "decision_md": f"/compare/decision.md?{query}",
        "decision_json": f"/compare/decision.json?{query}",
    }


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
