"""A fit search as data: one context for the API, the page, its live fragment, .json and
.csv. Each target's answer, bracket and next probes are worked out from the stored
probes by the same planner that queues them (app.queue.fit_state)."""

from __future__ import annotations

import csv
import io
from typing import Any

from app.dispatch import Dispatcher
from app.pages.fit_chart import fit_svg
from app.queue.fit_spec import FitSpec, path_for
from app.queue.fit_state import TargetState, TargetStatus, target_states
from app.store import Store
from app.store.fits import LIVE, FitRow, ProbeRow
from workers.catalog.jaxexport import ArtifactError, DimError, read_header
from workers.protocol import JobStatus
from workers.protocol.sizes import byte_text as gb

CSV_COLUMNS = (
    "fit",
    "dimension",
    "target",
    "path",
    "status",
    "criterion",
    "hbm_bytes",
    "usable_bytes",
    "largest_fitting",
    "peak_bytes_at_largest",
    "value_above",
    "peak_bytes_above",
    "compiles",
    "run_at_largest",
    "run_above",
    "non_monotone",
    "checks_done",
)


ANSWER_KEYS = (
    "largest_fitting",
    "largest_is_hi",
    "peak_bytes_at_largest",
    "run_at_largest",
    "value_above",
    "peak_bytes_above",
    "refused_above",
    "run_above",
)
"""A target's answer: null until it is proved."""


UNREAD = "not reported yet: no connected worker has read it from its libtpu"


def fit_links(fit_id: str) -> dict[str, str]:
    return {
        "self": f"/api/v1/fits/{fit_id}",
        "page": f"/fits/{fit_id}",
        "json": f"/fits/{fit_id}.json",
        "csv": f"/fits/{fit_id}.csv",
        "cancel": f"/api/v1/fits/{fit_id}/cancel",
    }


def _status(fit: FitRow, probes: list[ProbeRow]) -> str:
    """The search's status: queued until a probe has started, then running, then how
    it ended (done, failed, cancelled)."""
    if fit.status != LIVE:
        return fit.status
    started = any(p.judged or p.job_status != JobStatus.QUEUED.value for p in probes)
    return "running" if started else "queued"


def probe_public(probe: ProbeRow, dispatcher: Dispatcher) -> dict[str, Any]:
    """One probe: its value, verdict and peak (the refusal's figure when refused), and
    its compile's run (`run_id` is its job's id, as in /runs/{id})."""
    status = "judged" if probe.judged else (probe.job_status or "gone")
    out: dict[str, Any] = {
        "value": probe.value,
        "peak_bytes": probe.peak_bytes,
        "fits": probe.fits,
        "run_id": probe.job_id,
        "status": status,
        "refused": probe.refused,
        "failed": probe.failed,
        "link": f"/runs/{probe.job_id}" if probe.job_id and probe.job_status else None,
        "waiting": None,
    }
    if probe.job_status == JobStatus.QUEUED.value and probe.job_id is not None:
        job = dispatcher.store.get_job(probe.job_id)
        out["waiting"] = dispatcher.waiting_reason(job) if job is not None else None
    return out


def _answer(state: TargetState) -> dict[str, Any]:
    """The proved answer of a found target: the largest value that fits, its peak, and
    the value above with its peak (the proof); nothing until it is proved."""
    step = state.step
    if state.status is not TargetStatus.FOUND:
        return dict.fromkeys(ANSWER_KEYS) | {"largest_is_hi": False}
    largest = step.largest
    above = step.bracket.over
    at, over = state.probe_at(largest), state.probe_at(above)
    return {
        "largest_fitting": largest,
        "largest_is_hi": largest is not None and above is None,
        "peak_bytes_at_largest": at.peak_bytes if at is not None else None,
        "run_at_largest": at.job_id if at is not None else None,
        "value_above": above,
        "peak_bytes_above": over.peak_bytes if over is not None else None,
        "refused_above": over.refused if over is not None else None,
        "run_above": over.job_id if over is not None else None,
    }


def target_public(
    spec: FitSpec, state: TargetState, dispatcher: Dispatcher, *, ended: str | None
) -> dict[str, Any]:
    """One target's row: its criterion, the answer once proved, where the search
    stands (bracket, probes done and pending, what it compiles next) and every probe."""
    c = state.criterion
    status = state.status.value
    if ended == JobStatus.CANCELLED.value and state.status is TargetStatus.SEARCHING:
        status = "cancelled"
    failure = state.failure
    bracket = state.step.bracket
    return {
        "target": state.target,
        "path": path_for(spec, state.target).value,
        "status": status,
        "criterion": c.text(),
        "rule": c.rule.value,
        "hbm_bytes": c.hbm_bytes,
        "hbm_label": c.hbm_label,
        "usable_fraction": c.usable_fraction,
        "usable_bytes": c.usable_bytes,
        **_answer(state),
        "non_monotone": state.step.non_monotone,
        "non_monotone_probes": [list(pair) for pair in state.step.falls],
        "bracket": {"fits": bracket.fits, "over": bracket.over},
        "probes_done": sum(1 for p in state.probes if p.judged),
        "checks_done": state.step.checks,
        "probes_pending": len(state.pending),
        "next": list(state.step.values) if status == "searching" else [],
        "reason": f"the probe at {failure.value}: {failure.failed}" if failure else None,
        "probes": [probe_public(p, dispatcher) for p in state.probes],
    }


def fit_public(fit: FitRow, probes: list[ProbeRow], dispatcher: Dispatcher) -> dict[str, Any]:
    """The search as GET /api/v1/fits/{id} answers it (and the page reads it)."""
    spec = FitSpec.model_validate(fit.spec)
    ended = fit.status if fit.status != LIVE else None
    states = target_states(spec, probes, dispatcher.capacities())
    return {
        "id": fit.id,
        "status": _status(fit, probes),
        "reason": fit.reason,
        "workload": spec.workload,
        "artifact": spec.artifact,
        "params": spec.params,
        "dimension": spec.dimension,
        "range": spec.range,
        "step": spec.step,
        "usable_fraction": spec.usable_fraction,
        "created_at": fit.created_at,
        "targets": [target_public(spec, s, dispatcher, ended=ended) for s in states],
        "links": fit_links(fit.id),
    }


def artifact_dimensions(store: Store, sha256: str) -> list[str] | None:
    """An uploaded function's symbolic dimensions (None when it is not stored, or not
    an exported function)."""
    found = store.open_file(sha256)
    if found is None:
        return None
    try:
        with found:
            return read_header(found).dimensions()
    except (ArtifactError, DimError, OSError):
        return None


def load_fit(fit_id: str, dispatcher: Dispatcher) -> dict[str, Any] | None:
    """The search's public JSON, or None when there is no such search."""
    fit = dispatcher.store.get_fit(fit_id) if len(fit_id) <= 64 else None
    if fit is None:
        return None
    return fit_public(fit, dispatcher.store.fit_probes(fit.id), dispatcher)


def fit_csv(public: dict[str, Any]) -> str:
    """One line per target: the page's table, in bytes (GB = 10^9 bytes on the page)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for t in public["targets"]:
        values = {
            **t,
            "fit": public["id"],
            "dimension": public["dimension"],
            "compiles": t["probes_done"],
            "non_monotone": "true" if t["non_monotone"] else "false",
        }
        writer.writerow(["" if values.get(k) is None else str(values[k]) for k in CSV_COLUMNS])
    return out.getvalue()


def _bytes_text(value: int | None) -> str | None:
    return f"{gb(value)} ({value:,} bytes)" if value is not None else None


def _largest_text(public: dict[str, Any], t: dict[str, Any]) -> str:
    """The answer in words: the value, or why there is none yet (or at all)."""
    lo, hi = public["range"]
    if t["status"] != "found":
        return {"failed": "failed", "cancelled": "cancelled"}.get(t["status"], "searching…")
    if t["largest_fitting"] is None:
        return f"none: even {lo:,} does not fit"
    if t["largest_is_hi"]:
        return f"{hi:,}: the top of the range fits (a larger one may too)"
    return f"{t['largest_fitting']:,}"


def compiles_text(t: dict[str, Any]) -> str:
    """The compiles of a target's search, those that checked an answer apart."""
    checks, done = t["checks_done"], t["probes_done"]
    searched = f"{done - checks} compile{'' if done - checks == 1 else 's'}"
    return f"{searched} + {checks} to check" if checks else searched


def falls_text(dimension: str, t: dict[str, Any]) -> str | None:
    """What a target's probes show when the peak is not monotone (None when it looks so),
    and what the search did about it."""
    if not t["non_monotone"]:
        return None
    probes = {p["value"]: p for p in t["probes"]}
    shown = []
    for a, b in t["non_monotone_probes"][:2]:
        low, high = probes.get(a), probes.get(b)
        if low is None or high is None:
            continue
        if high["fits"] and not low["fits"]:
            shown.append(f"{dimension}={b:,} fits where {dimension}={a:,} does not")
        else:
            shown.append(
                f"{dimension}={a:,} needs {_bytes_text(low['peak_bytes'])}, "
                f"{dimension}={b:,} {_bytes_text(high['peak_bytes'])}"
            )
    return (
        f"Not monotone: the peak falls as {dimension} grows ({'; '.join(shown)}). So the "
        "search did not stop at the first boundary it proved: it checked the rest of the "
        f"range above it ({t['checks_done']} compiles, apart from the search's own). The "
        "answer is the largest value that fits of those compiled, the next value on the grid "
        "not; a value not compiled may still fit above it."
    )


def _progress_text(t: dict[str, Any]) -> str:
    """Where a target's search stands: compiles done, the bracket, what compiles now."""
    done = compiles_text(t)
    bracket = t["bracket"]
    known = []
    if bracket["fits"] is not None:
        known.append(f"{bracket['fits']:,} fits")
    if bracket["over"] is not None:
        known.append(f"{bracket['over']:,} does not")
    pending = [p["value"] for p in t["probes"] if p["status"] in ("queued", "running")]
    now = f"; compiling {', '.join(f'{v:,}' for v in pending)}" if pending else ""
    return f"{done}{' · ' + ', '.join(known) if known else ''}{now}"


def fit_view(public: dict[str, Any]) -> dict[str, Any]:
    """The page's table and probe lists, in words and decimal units (GB = 10^9 bytes)."""
    rows = []
    for t in public["targets"]:
        rows.append(
            {
                **t,
                "largest_text": _largest_text(public, t),
                "peak_text": _bytes_text(t.get("peak_bytes_at_largest")),
                "above_text": _bytes_text(t.get("peak_bytes_above")),
                "hbm_text": f"{t['hbm_label']} ({t['hbm_bytes']:,} bytes)",
                "usable_text": _bytes_text(t["usable_bytes"]) or UNREAD,
                "progress": _progress_text(t),
                "falls_text": falls_text(public["dimension"], t),
                "probe_rows": [
                    {**p, "peak_text": _bytes_text(p["peak_bytes"])} for p in t["probes"]
                ],
            }
        )
    live = public["status"] in ("queued", "running")
    return {"fit": public, "rows": rows, "live": live, "fit_chart": fit_svg(public)}
