"""Each side of a comparison: its runs with their medians, warm-up discards and shapes and
how many repeats it lacks, a compile-only side's compiler output, and the runs a side B
may be picked from. Built from the job JSON the API returns."""

from __future__ import annotations

import statistics
from typing import Any

from app.dispatch import Dispatcher
from app.pages.compare.guard import RunFacts, run_facts
from app.pages.compare.request import CompareInputError
from app.pages.compare.stats import MIN_RUNS
from app.pages.jobs import job_public
from app.pages.matrices import compile_facts
from app.pages.runs.memory import run_peak
from app.pages.runs.memory_fit import memory_fit
from app.pages.runs.plots import format_seconds
from workers.catalog.kernel_words import kernel_phrase
from workers.protocol import PathId


def side_jobs(dispatcher: Dispatcher, field: str, ids: list[str]) -> list[dict[str, Any]]:
    """The job JSON of each run id in `ids`; CompareInputError naming `field` for one
    that does not exist."""
    jobs = []
    for job_id in ids:
        row = dispatcher.store.get_job(job_id)
        if row is None:
            raise CompareInputError(field, f"no run {job_id!r}")
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


def side(
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
                "warmup_discarded": m.get("warmup_discarded") if m else None,
                "shape": m.get("shape") if m else None,
                "shape_checked": m.get("shape_checked") if m else None,
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
    shapes = {
        name: sum(1 for r in usable if r["shape"] == name) for name in ("bimodal", "drifting")
    }
    return {
        "shapes": shapes,
        "unsure": sum(shapes.values()),
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


def groups_text(collective: dict[str, Any]) -> str:
    """A collective's replica groups in one spelling, device ids in braces ("{0,1},{2,3}"),
    whichever of HLO's spellings its text used; a collective-permute names its pairs."""
    groups = collective.get("groups")
    if groups:
        return ",".join("{" + ",".join(str(d) for d in g) + "}" for g in groups)
    if collective.get("kind", "").startswith("collective-permute"):
        return "none: it sends along source→target pairs (see its HLO)"
    return str(collective.get("replica_groups") or "not stated")


def _kinds(fusions: list[dict[str, Any]]) -> str:
    """How many fusions of each kind, most first: "kLoop 40, kInput 12"."""
    counts: dict[str, int] = {}
    for f in fusions:
        counts[str(f.get("kind"))] = counts.get(str(f.get("kind")), 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


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
        "fusion_kinds": _kinds(summary.get("fusions") or []),
        "collectives": [
            f"{c['kind']} {c.get('shape') or ''} groups {groups_text(c)}".strip()
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
            refused=target.get("refused"),
        ),
        "host_memory": run_peak(run),
        "kernel": kernel_phrase(
            job["workload"], job["path"], run.get("params") or {}, run.get("extra")
        )
        or "XLA's own kernels",
        "schedules": target.get("kernels") or [],
        "resources": [
            r for r in run.get("kernel_resources") or [] if job["path"] != PathId.CUDA.value
        ],
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
