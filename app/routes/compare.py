"""The comparison pages: /compare (page, htmx fragment) and /compare.json from one context;
queueing the repeats a side lacks; the decision record as Markdown and JSON; and a
run's own "run it again" (optionally with the profiler on)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from pydantic import ValidationError

from app.deps import AdmissionDep, DispatcherDep, HloDiffsDep, StateDep
from app.dispatch import Dispatcher
from app.pages.compare.decision import DecisionNotes, build_record, to_markdown
from app.pages.compare.hlo_diffs import HloDiffs
from app.pages.compare.hlo_section import changes_section
from app.pages.compare.request import CompareInputError, Comparison, read_comparison
from app.pages.compare.stats import MIN_RUNS
from app.pages.compare.view import compare_context, json_twin
from app.queue.admission import Admission
from app.queue.submission import read_capped_body, validate_submission
from app.queue.validation import ValidJob
from app.reader.tour import TOUR_JOBS
from app.routes.common import is_htmx, render
from app.routes.forms import FormValueError, number, whole_number
from app.settings import Settings

router = APIRouter(include_in_schema=False)

FORM_MAX_BYTES = 16 * 1024
MAX_REPEATS = 10
"""Jobs one click may queue (a side needs MIN_RUNS; more repeats narrow the interval)."""

Ids = Annotated[str | None, Query(max_length=1000)]
Short = Annotated[str | None, Query(max_length=64)]


def asked(  # noqa: PLR0917 - one parameter per query field
    a: Ids = None,
    b: Ids = None,
    runs: Ids = None,
    boundary: Short = None,
    subject_a: Short = None,
    subject_b: Short = None,
    ir: Short = None,
) -> Comparison | CompareInputError:
    """The comparison the query asks for, or what is wrong with the query.

    One reading of the query for the page (which shows the mistake), the JSON twin and
    the decision record (which answer 422).
    """
    try:
        return read_comparison(a, b, runs, boundary, subject_a, subject_b, ir)
    except CompareInputError as exc:
        return exc


Asked = Annotated[Comparison | CompareInputError, Depends(asked)]


def _read(found: Comparison | CompareInputError) -> Comparison:
    if isinstance(found, CompareInputError):
        raise HTTPException(status_code=422, detail=[{"field": found.field, "message": str(found)}])
    return found


def _context(dispatcher: Dispatcher, req: Comparison) -> dict[str, Any]:
    try:
        return compare_context(dispatcher, req)
    except CompareInputError as exc:
        raise HTTPException(
            status_code=404, detail=[{"field": exc.field, "message": str(exc)}]
        ) from None


async def _with_changes(diffs: HloDiffs, req: Comparison, ctx: dict[str, Any]) -> None:
    """Add the HLO diff of the two sides' first runs ("What changed"), when both have HLO."""
    if req.b and ctx.get("sides", {}).get("b") is not None:
        ctx["hlo_changes"] = await changes_section(diffs, req.a[0], req.b[0])


def _page(state: Any, **extra: Any) -> dict[str, Any]:
    """What every rendering of the comparison page needs besides the comparison."""
    return {
        "min_runs": MIN_RUNS,
        "token_needed": state.settings.SUBMIT_TOKEN is not None,
        "nav": "runs",
        "error": None,
        "start": None,
        "record_values": {},
        "record_errors": {},
        **extra,
    }


def _recent_timed_runs(dispatcher: Dispatcher, limit: int = 10) -> list[dict[str, Any]]:
    """Finished runs that executed (a compile-only run has no time to compare), newest
    first, to start a comparison from."""
    rows, _ = dispatcher.store.list_jobs(status="done", limit=limit * 3)
    timed = [r for r in rows if "execute" in (r.spec.get("stages") or ["execute"])]
    return [{"id": r.id, "workload": r.workload, "path": r.path} for r in timed[:limit]]


@router.api_route("/compare", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def compare_page(
    request: Request, state: StateDep, dispatcher: DispatcherDep, diffs: HloDiffsDep, req: Asked
) -> HTMLResponse:
    """Two sides side by side: the guard's verdict, the ratio, stages, samples and IR diff.

    Without a query it says how to start; a wrong query or a run that does not exist is
    explained on the page itself."""
    template = "_compare.html" if is_htmx(request) else "compare.html"
    if isinstance(req, CompareInputError):
        if not any(request.query_params.get(k) for k in ("a", "b", "runs")):
            start = _recent_timed_runs(dispatcher)
            return render(state, template, _page(state, c=None, start=start))
        return render(state, template, _page(state, c=None, error=str(req)), 422)
    try:
        ctx = compare_context(dispatcher, req)
    except CompareInputError as exc:
        return render(state, template, _page(state, c=None, error=str(exc)), 404)
    await _with_changes(diffs, req, ctx)
    return render(state, template, _page(state, c=ctx))


@router.api_route("/compare.json", methods=["GET", "HEAD"])
async def compare_json(dispatcher: DispatcherDep, diffs: HloDiffsDep, req: Asked) -> JSONResponse:
    """The same comparison as JSON."""
    comparison = _read(req)
    ctx = _context(dispatcher, comparison)
    await _with_changes(diffs, comparison, ctx)
    return JSONResponse(json_twin(ctx))


def _notes(request: Request) -> DecisionNotes:
    """The user's notes and prices from the query string, checked (422 naming the field)."""
    fields = {k: v for k, v in request.query_params.items() if k in DecisionNotes.model_fields}
    for key in ("price_a", "price_b"):
        raw = fields.get(key, "").strip()
        if not raw:
            fields.pop(key, None)
            continue
        try:
            fields[key] = number(key, raw)  # type: ignore[assignment]
        except FormValueError as exc:
            raise HTTPException(
                status_code=422, detail=[{"field": key, "message": str(exc)}]
            ) from None
    try:
        return DecisionNotes.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in err["loc"])
        raise HTTPException(
            status_code=422, detail=[{"field": field, "message": f"{field}: {err['msg']}"}]
        ) from None


def _record_context(
    request: Request, state: Any, dispatcher: Dispatcher, found: Comparison | CompareInputError
) -> tuple[Any, str] | HTMLResponse:
    """The decision record, or (for a browser whose notes are wrong) the comparison page
    again with the typed values kept and each mistake named beside its field."""
    req = _read(found)
    if not req.b:
        raise HTTPException(
            status_code=422, detail=[{"field": "b", "message": "b: a record needs two sides"}]
        )
    ctx = _context(dispatcher, req)
    if ctx.get("compile_only"):  # e.g. XLA against Pallas on a target with no hardware here
        raise HTTPException(
            status_code=422,
            detail=[
                {
                    "field": "b",
                    "message": "b: both sides only compiled and nothing was timed, so there is "
                    "no decision to record (a record sets measured times against prices)",
                }
            ],
        )
    if not ctx["guard"]["comparable"]:
        raise HTTPException(
            status_code=422,
            detail=[
                {
                    "field": "b",
                    "message": "b: the sides are not comparable, so there is no decision to record",
                }
            ],
        )
    try:
        notes = _notes(request)
    except HTTPException as exc:
        if "text/html" not in request.headers.get("accept", ""):
            raise
        problems: list[dict[str, str]] = exc.detail  # type: ignore[assignment]  # from _notes
        errors = {d["field"]: d["message"] for d in problems}
        values = {k: v[:4000] for k, v in request.query_params.items()}
        page = _page(state, c=ctx, record_values=values, record_errors=errors)
        return render(state, "compare.html", page, 422)
    base = (state.settings.PUBLIC_BASE_URL or str(request.base_url)).rstrip("/")
    record = build_record(ctx, notes, base)
    return record, req.a[0]


@router.api_route("/compare/decision.json", methods=["GET", "HEAD"])
async def decision_json(
    request: Request, state: StateDep, dispatcher: DispatcherDep, req: Asked
) -> Any:
    """The decision record as JSON (reads back into app.pages.compare.decision.DecisionRecord)."""
    found = _record_context(request, state, dispatcher, req)
    if isinstance(found, HTMLResponse):
        return found
    record, first = found
    return PlainTextResponse(
        record.model_dump_json(indent=2),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="decision-{first}.json"'},
    )


@router.api_route("/compare/decision.md", methods=["GET", "HEAD"])
async def decision_markdown(
    request: Request, state: StateDep, dispatcher: DispatcherDep, req: Asked
) -> Response:
    """The decision record as Markdown."""
    found = _record_context(request, state, dispatcher, req)
    if isinstance(found, HTMLResponse):
        return found
    record, first = found
    return PlainTextResponse(
        to_markdown(record),
        media_type="text/markdown",
        headers={"Content-Disposition": f'attachment; filename="decision-{first}.md"'},
    )


async def _form(request: Request) -> dict[str, str]:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise HTTPException(status_code=415, detail="send the form as urlencoded fields")
    body = await read_capped_body(request, FORM_MAX_BYTES, "form")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def repeat_jobs(
    admission: Admission,
    settings: Settings,
    job_id: str,
    count: int,
    *,
    changes: dict[str, Any] | None = None,
) -> list[ValidJob]:
    """`count` more jobs with `job_id`'s spec (with `changes` to its measure options),
    validated like every submission, for the caller to queue in one admission call."""
    dispatcher = admission.dispatcher
    job = dispatcher.store.get_job(job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no run {job_id[:64]!r}")
    spec = dict(job.spec)
    if changes:
        spec["measure"] = {**(spec.get("measure") or {}), **changes}
    valid = validate_submission(spec, dispatcher.store, settings.MAX_JOB_BYTES)
    return [valid] * count


def _check_token(form: dict[str, str], admission: Admission) -> None:
    try:
        admission.check_token(form.get("token"), "queueing runs", bearer=False)
    except HTTPException:
        raise HTTPException(
            status_code=401, detail="this server needs its submission token"
        ) from None


@router.post("/compare/repeat", response_class=HTMLResponse)
async def compare_repeat(
    request: Request, state: StateDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> RedirectResponse:
    """Queue the repeats each side lacks (resubmitting its first run's spec); back to the
    comparison with the new runs added to their sides."""
    form = await _form(request)
    _check_token(form, admission)
    req = _read(asked(form.get("a"), form.get("b"), None, form.get("boundary")))
    ctx = _context(dispatcher, req)
    client = admission.client(request)
    sides: dict[str, list[str]] = {"a": list(req.a), "b": list(req.b)}
    wanted = form.get("side", "both")
    planned: list[tuple[str, list[ValidJob]]] = []
    for name, side in ctx["sides"].items():
        if side is None or wanted not in (name, "both"):
            continue
        extra = form.get(f"extra_{name}", "").strip()
        try:
            count = whole_number(f"extra_{name}", extra, low=0) if extra else side["lacking"]
        except FormValueError as exc:
            raise HTTPException(
                status_code=422, detail=[{"field": f"extra_{name}", "message": str(exc)}]
            ) from None
        count = min(count, MAX_REPEATS)
        if count > 0:
            planned.append((name, repeat_jobs(admission, state.settings, sides[name][0], count)))
    # Both sides in one admission call: all of them queue, or none does (a 429 with half
    # queued would make a retry queue that half again).
    queued = iter(admission.queue(client, [job for _, jobs in planned for job in jobs]))
    for name, jobs in planned:
        sides[name] += [next(queued).id for _ in jobs]
    query = Comparison(sides["a"], sides["b"], req.boundary).query()
    return RedirectResponse(f"/compare?{query}", status_code=303)


@router.post("/tour/compare", response_class=HTMLResponse)
async def tour_compare(
    request: Request, state: StateDep, dispatcher: DispatcherDep, admission: AdmissionDep
) -> RedirectResponse:
    """The landing page's second button: queue the tour's two compiles (v6e:2x4 and
    h100:8) through the one admission and open their comparison, which fills in as they
    finish."""
    form = await _form(request)
    _check_token(form, admission)
    valid = [
        validate_submission(job, dispatcher.store, state.settings.MAX_JOB_BYTES)
        for job in TOUR_JOBS
    ]
    a, b = admission.queue(admission.client(request), valid)
    return RedirectResponse(f"/compare?{Comparison([a.id], [b.id], None).query()}", 303)


@router.post("/runs/{job_id}/repeat", response_class=HTMLResponse)
async def run_repeat(
    job_id: str, request: Request, state: StateDep, admission: AdmissionDep
) -> RedirectResponse:
    """Run a job again with the same spec; `profile=on` turns the profiler on for it,
    `pipeline=on` the pass pipeline capture."""
    form = await _form(request)
    _check_token(form, admission)
    changes = {
        option: True
        for option in ("profile", "pipeline")
        if form.get(option) in ("on", "1", "true")
    } or None
    client = admission.client(request)
    (new,) = admission.queue(
        client, repeat_jobs(admission, state.settings, job_id, 1, changes=changes)
    )
    return RedirectResponse(f"/runs/{new.id}", status_code=303)
