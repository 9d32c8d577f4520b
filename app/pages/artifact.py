"""An uploaded function's page: what it declares (arguments and results named by their
paths), the targets it fits, and the memory-fit table of its compiles, one row per target.

The page, its live fragment and `/artifacts/{sha256}.json` are built from this one
context. A target fits an artifact when its compiler builds for one of the artifact's
platforms and it has at least as many devices as the artifact was exported for; the
one-click set is the 8-chip trio the question is usually about (v6e-8, H100 ×8, B200 ×8),
or the smallest v6e slices that hold a larger artifact.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import HTTPException

from app.dispatch import Dispatcher
from app.pages.jobs import iso
from app.pages.matrices import compile_facts
from app.pages.runs.plots import format_seconds
from app.queue.uploads import UploadError, describe, kind_of, sources_of
from workers.catalog.target_rules import JAX_PLATFORM_OF, placement_on
from workers.protocol import (
    FINAL_STATUSES,
    TARGET_IDS,
    JobStatus,
    PathId,
    Target,
    TargetModel,
    fit_limit,
    parse_target,
)
from workers.protocol.compiler_options import as_text
from workers.protocol.dumps import first_of
from workers.protocol.sizes import byte_text as gb

ONE_CLICK = ("v6e:2x4", "h100:8", "b200:8")
"""The targets "Compile for v6e-8, H100 ×8, B200 ×8" compiles for, where they fit."""

MAX_LISTED = 12
"""Arguments or results listed before the rest fold away."""


def target_label(target: Target) -> str:
    """A TPU slice by Google's name for it (`v6e-8`, `v5p-8`: chips, or TensorCores on v4,
    v5p and TPU7x), `H100 ×8` for GPUs."""
    if target.grid is not None:
        return f"{target.model.value}-{target.chips * target.chip.cores_per_chip}"
    return f"{target.model.value.upper()} ×{target.count}"


def target_path(target: Target) -> PathId:
    """The JAX path a target compiles on: the one it names (jax-tpu, jax-gpu)."""
    return target.path


def fitting_targets(header: dict[str, Any]) -> list[Target]:
    """Every target the artifact fits: its platform exported, and enough devices."""
    platforms = list(header.get("platforms", []))
    devices = int(header.get("nr_devices", 1))
    found = []
    for target_id in TARGET_IDS:
        target = parse_target(target_id)
        if JAX_PLATFORM_OF[target.platform] in platforms and target.count >= devices:
            found.append(target)
    return found


def one_click(fitting: list[Target], devices: int) -> list[Target]:
    """The targets the one-click button compiles for."""
    by_id = {t.id: t for t in fitting}
    chosen = [by_id[t] for t in ONE_CLICK if t in by_id]
    if devices > 8:  # no GPU host has more than 8: the smallest v6e slice that holds it
        chosen = [t for t in fitting if t.model is TargetModel.V6E][:1]
    return chosen


def _named(
    names: list[str], avals: list[str], placements: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each argument's or result's row: its name, shape and sharding (None when the
    header's shardings were not read)."""
    shardings: list[dict[str, Any] | None] = list(placements) or [None] * len(names)
    return [
        {"name": n, "aval": a, "sharding": p}
        for n, a, p in zip(names, avals, shardings, strict=True)
    ]


def mesh_text(header: dict[str, Any]) -> str | None:
    """The program's mesh as the pages name it (`data: 2 × model: 4`; several, rarely,
    joined by "and"), or None for a program of one device."""
    if int(header.get("nr_devices", 1)) <= 1:
        return None
    meshes = [str(m["text"]) for m in header.get("meshes") or []]
    if meshes:
        return " and ".join(meshes)
    placed = [*(header.get("in_shardings") or []), *(header.get("out_shardings") or [])]
    if any(s.get("hlo_sharding") for s in placed):
        return "not named (an older jax kept XLA's HLO shardings only)"
    return "not named (no argument or result is placed)"


def _collectives(run: dict[str, Any]) -> list[str]:
    """Each collective the partitioner chose: kind, payload and bytes."""
    found = []
    for c in (run.get("hlo_summary") or {}).get("collectives") or []:
        # Layouts ({1,0:T(8,128)}) and index notes say nothing about what is moved.
        shape = re.sub(r"/\*[^*]*\*/|\{[^{}]*\}", "", str(c.get("shape", "")))
        shape = shape if len(shape) <= 48 else shape[:45].rsplit(",", 1)[0] + ", …)"
        size = f", {gb(int(c['bytes']))}" if c.get("bytes") else ""
        found.append(f"{c['kind']} {shape}{size}")
    return found


def fit_row(job: Any, dispatcher: Dispatcher, devices: int) -> dict[str, Any]:
    """One target's row: its compile's state, memory per device against the HBM, and the
    collectives its partitioner chose."""
    target = parse_target(str(job.spec["target"]))
    row: dict[str, Any] = {
        "target": target.id,
        "label": target_label(target),
        "job": job.id,
        "link": f"/runs/{job.id}",
        "status": job.status.value,
        "final": job.status in FINAL_STATUSES,
        "reason": dispatcher.waiting_reason(job) or job.reason,
        "placement": placement_on(target, devices),
        "hbm": target.chip.device_hbm_label,
        "compiled": False,
        "peak_bytes": None,
        "peak": None,
        "verdict": None,
        "fits": None,
        "collectives": [],
        "compile": None,
        "compare": None,
        "compare_with": None,
    }
    stored = dispatcher.store.get_run(job.id) if job.status == JobStatus.DONE else None
    if stored is None:
        return row
    run: dict[str, Any] = json.loads(stored.result)
    facts = compile_facts(run)
    compile_s = (run.get("stage_seconds") or {}).get("compile")
    report = run.get("target") or {}
    memory = report.get("memory") or {}
    needed, hbm = facts.get("memory_needed_bytes"), facts.get("hbm_bytes")
    limit, usable = fit_limit(memory) if hbm else (None, False)
    if usable and limit is not None:
        row["hbm"] = f"{gb(limit)} usable ({limit:,} bytes); published {row['hbm']}"
    row.update(
        compiled=True,
        placement=report.get("mesh") or row["placement"],
        peak_bytes=memory.get("peak_bytes"),
        peak=gb(int(memory["peak_bytes"])) if memory.get("peak_bytes") is not None else None,
        needed_bytes=needed,
        fits=facts.get("fits"),
        fusions=facts.get("fusions"),
        collectives=_collectives(run),
        compile=format_seconds(float(compile_s)) if compile_s is not None else None,
    )
    if needed is not None and limit:
        row["verdict"] = (
            f"Fits: {gb(needed)} of {gb(limit)} ({100 * needed / limit:.3g} %)"
            if needed <= limit
            else f"Does not fit by {gb(needed - limit)}"
        )
    return row


def options_of(spec: dict[str, Any]) -> str | None:
    """What sets a job's compile apart from the artifact's other compiles for its target,
    as text: the values of its symbolic dimensions ("b=64") and its compiler options
    ("xla_gpu_enable_triton_gemm=false"); None for no dimension and default options."""
    dims = (spec.get("params") or {}).get("dims") or {}
    options = spec.get("compiler_options") or {}
    words = [f"{k}={v}" for k, v in sorted(dims.items())] + ([as_text(options)] if options else [])
    return " ".join(words) or None


def _shown(jobs: list[Any]) -> tuple[Any, list[Any]]:
    """Of one target's compiles (newest first): the one its row shows, the newest with the
    compiler's default options when there is one, and the newest of each other set of
    options, which the row lists beside it."""
    shown = next((j for j in jobs if options_of(j.spec) is None), jobs[0])
    others: dict[str | None, Any] = {}
    for job in jobs:
        if job is not shown and options_of(job.spec) != options_of(shown.spec):
            others.setdefault(options_of(job.spec), job)
    return shown, list(others.values())


def fit_rows(sha256: str, dispatcher: Dispatcher, devices: int) -> list[dict[str, Any]]:
    """One row per target, in the targets' order: the artifact's newest compile-only job
    for it with the compiler's default options (else the newest), naming its options and
    linking the compiles made with other options, each row linked to the comparison of its
    HLO with the first done row's (only between rows of the same options)."""
    by_target: dict[str, list[Any]] = {}
    for job in jobs_of(sha256, dispatcher):
        spec = job.spec
        target = spec.get("target")
        if not target or any(stage != "compile" for stage in spec.get("stages", [])):
            continue
        by_target.setdefault(str(target), []).append(job)
    order = {t: i for i, t in enumerate(TARGET_IDS)}
    rows = []
    for target in sorted(by_target, key=lambda t: order.get(t, len(order))):
        shown, others = _shown(by_target[target])
        row = fit_row(shown, dispatcher, devices)
        row["options"] = options_of(shown.spec)
        row["variants"] = [
            {"options": options_of(j.spec) or "default options", "link": f"/runs/{j.id}"}
            for j in others
        ]
        rows.append(row)
    done = [r for r in rows if r["compiled"]]
    if done:
        first = done[0]
        for row in [r for r in done[1:] if r["options"] == first["options"]]:
            row["compare"] = f"/compare?a={first['job']}&b={row['job']}&ir=hlo"
            row["compare_with"] = first["label"]
    return rows


RUNS_LISTED = 20
"""The artifact's newest runs its page lists; older ones are on /runs."""


def jobs_of(sha256: str, dispatcher: Dispatcher, limit: int = 200) -> list[Any]:
    """Newest first: the jobs that run or compile this artifact (not those that only name
    it as a file: an .npz's sha256 is never an artifact, and not the follow-ups that
    bring a compile's dumps: they are part of the run they complete)."""
    return [
        job
        for job in dispatcher.store.jobs_naming("exported", sha256, limit)
        if (job.spec.get("params") or {}).get("artifact") == sha256 and first_of(job.id) is None
    ]


def run_rows(sha256: str, dispatcher: Dispatcher) -> tuple[list[dict[str, Any]], bool]:
    """The artifact's newest runs, compiles and CPU runs alike (RUNS_LISTED at most), and
    whether there are more."""
    jobs = jobs_of(sha256, dispatcher, RUNS_LISTED + 1)
    rows = []
    for job in jobs[:RUNS_LISTED]:
        spec = job.spec
        stages = spec.get("stages") or []
        params = spec.get("params") or {}
        checked = "with a reference" if params.get("reference") else None
        options = options_of(spec)
        rows.append(
            {
                "id": job.id,
                "link": f"/runs/{job.id}",
                "where": spec.get("target") or job.path,
                "path": job.path,
                "what": "compile" if stages == ["compile"] else "run",
                "checked": checked,
                "options": options,
                "status": job.status.value,
                "created_at": iso(job.created_at),
            }
        )
    return rows, len(jobs) > RUNS_LISTED


def uploaded_reference(sha256: str, dispatcher: Dispatcher) -> dict[str, str]:
    """The run form's fields for the reference uploaded with the artifact: the newest job
    of it that names one (`export-fn --upload` queues a CPU run checked against its
    sample), with the seed, input rules and inputs that sample was drawn from."""
    for job in jobs_of(sha256, dispatcher):
        params = job.spec.get("params") or {}
        if not params.get("reference"):
            continue
        found = {
            "reference": str(params["reference"]),
            "inputs": str(params.get("inputs") or ""),
            "seed": str(params.get("seed", 0)),
            "reference_from": job.id,
        }
        if params.get("input_rules"):
            found["input_rules"] = json.dumps(params["input_rules"])
        return found
    return {}


def stored_file(dispatcher: Dispatcher, sha256: str) -> dict[str, Any]:
    """The public description of a stored upload, or 404."""
    store = dispatcher.store
    found = store.file_info(sha256) if len(sha256) == 64 else None
    kind = kind_of(found.media_type) if found is not None else None
    source = store.open_file(sha256) if kind is not None else None
    if found is None or kind is None or source is None:
        raise HTTPException(status_code=404, detail=f"no uploaded file {sha256[:64]!r}")
    with source:
        try:
            described = describe(kind, source)
        except UploadError as exc:  # stored before a stricter check: say so, do not fail
            described = {"problem": str(exc)}
    if kind == "exported":  # the Python lines export-fn sent with it, if any
        sent = sources_of(store, found.sha256)
        described["sources"] = {"sha256": sent[0], **sent[1].summary()} if sent else None
    return {
        "sha256": found.sha256,
        "kind": kind,
        "media_type": found.media_type,
        "size": found.size,
        **described,
        "links": {
            "self": f"/api/v1/artifacts/{found.sha256}",
            "page": f"/artifacts/{found.sha256}",
        },
    }


def artifact_context(
    info: dict[str, Any], dispatcher: Dispatcher, ticked: list[str] | None = None
) -> dict[str, Any]:
    """What the artifact's page shows beyond the file's own description. `ticked`: the
    targets the person last chose (their boxes stay ticked); None: the one button's."""
    header = info.get("header")
    if not header:
        # An .npz (or an unreadable file): nothing to compile, nothing pending.
        empty: dict[str, Any] = {
            "arguments": [],
            "results": [],
            "mesh": None,
            "fitting": [],
            "one_click": [],
        }
        return {**empty, "fit": [], "fit_pending": False, "runs": [], "more_runs": False}
    devices = int(header.get("nr_devices", 1))
    fitting = fitting_targets(header)
    chosen = one_click(fitting, devices)
    offered = {t for w in dispatcher.connected_workers() for t in w.capabilities.targets}
    rows = fit_rows(info["sha256"], dispatcher, devices)
    runs, more_runs = run_rows(info["sha256"], dispatcher)
    return {
        "arguments": _named(
            header.get("argument_names", []),
            header.get("in_avals", []),
            header.get("in_shardings", []),
        ),
        "results": _named(
            header.get("result_names", []),
            header.get("out_avals", []),
            header.get("out_shardings", []),
        ),
        "mesh": mesh_text(header),
        "max_listed": MAX_LISTED,
        "fitting": [
            {
                "id": t.id,
                "label": target_label(t),
                "chip": t.chip.name,
                "placement": placement_on(t, devices),
                "offered": t.id in offered,
                "chosen": t in chosen if ticked is None else t.id in ticked,
            }
            for t in fitting
        ],
        "one_click": [t.id for t in chosen],
        "one_click_label": ", ".join(target_label(t) for t in chosen),
        "fit": rows,
        "fit_pending": any(not r["final"] for r in rows),
        "runs": runs,
        "more_runs": more_runs,
        "runs_listed": RUNS_LISTED,
    }
