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
from typing import Any

from fastapi import HTTPException

from app.dispatch import Dispatcher
from app.pages.artifact_fit import fit_table, options_of, target_label
from app.pages.jobs import iso
from app.queue.uploads import UploadError, describe, kind_of, sources_of
from workers.catalog.target_rules import JAX_PLATFORM_OF, placement_on
from workers.protocol import (
    TARGET_IDS,
    PathId,
    Target,
    TargetModel,
    parse_target,
)
from workers.protocol.dumps import first_of

ONE_CLICK = ("v6e:2x4", "h100:8", "b200:8")
"""The targets "Compile for v6e-8, H100 ×8, B200 ×8" compiles for, where they fit."""

MAX_LISTED = 12
"""Arguments or results listed before the rest fold away."""


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


def compile_jobs(sha256: str, dispatcher: Dispatcher) -> list[Any]:
    """Newest first: the artifact's compile-only jobs for a target."""
    return [
        job
        for job in jobs_of(sha256, dispatcher)
        if job.spec.get("target") and all(s == "compile" for s in job.spec.get("stages", []))
    ]


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
        none: dict[str, Any] = {
            "fit": [],
            "fit_compared": None,
            "fit_elsewhere": [],
            "fit_probes": [],
        }
        return {**empty, **none, "fit_pending": False, "runs": [], "more_runs": False}
    devices = int(header.get("nr_devices", 1))
    fitting = fitting_targets(header)
    chosen = one_click(fitting, devices)
    offered = {t for w in dispatcher.connected_workers() for t in w.capabilities.targets}
    table = fit_table(compile_jobs(info["sha256"], dispatcher), dispatcher, devices)
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
        "fit": table.rows,
        "fit_compared": table.compared,
        "fit_elsewhere": table.elsewhere,
        "fit_probes": table.probes,
        "fit_pending": table.pending,
        "runs": runs,
        "more_runs": more_runs,
        "runs_listed": RUNS_LISTED,
    }
