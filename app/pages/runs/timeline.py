"""A profiled run's trace as a timeline on its own page, in the vendored viewer.

The viewer (speedscope, vendored under static/vendor/speedscope/ with its licence) runs in
a same-origin frame and reads the run's Chrome trace from `/runs/{id}/profile/trace.json`:
the profiler's `*.trace.json.gz` member, with three changes that only the viewer needs
(`viewer_trace`). The download (`/runs/{id}/profile/perfetto.json.gz`) stays byte for byte
the profiler's own file. Nothing is fetched from anywhere but this server.
"""

from __future__ import annotations

import gzip
import io
import json
from typing import Any
from urllib.parse import quote

from app.pages.runs.trace_threads import CALL, viewer_numbers
from app.web.security import VIEWER_PREFIX

VIEWER_MAX_BYTES = 64 * 1024 * 1024
"""The largest inflated trace rewritten for the viewer (it is parsed whole: several times
this in memory); a larger one is offered as a download only. The stored trace is at most
BOUNDARY_PROFILE_MAX_BYTES packed, and inflates at most 100 times that
(app.store.profiles.INFLATE_RATIO)."""

NOISY_ARGS = frozenset({"_src", "run_id"})
"""Event arguments the viewer's copy leaves out (the download keeps them)."""

KEYS_HELP = (
    "It opens on the thread that ran most of the compiled program (a device's XLA ops, or "
    "XLA:CPU's worker threads) and ends with the last profiled call (the download also holds "
    "the profiler stopping). The buttons choose the view, the thread and the zoom; in the "
    "viewer, keys do the same (1 2 3, n p, + − 0, arrows). Tap or hover a frame for its "
    "duration"
)


class TraceTooLarge(ValueError):
    """The trace inflates past VIEWER_MAX_BYTES: offer the download instead."""


def timeline_urls(job_id: str) -> dict[str, str]:
    """The timeline page, the viewer's copy of the trace, and the viewer told to read it."""
    trace = f"/runs/{job_id}/profile/trace.json"
    # No `title=`: the viewer then heads each thread with its process and thread names.
    return {
        "page": f"/runs/{job_id}/profile/timeline",
        "trace": trace,
        "viewer": f"{VIEWER_PREFIX}index.html#profileURL={quote(trace, safe='')}",
    }


def _for_viewer(
    event: dict[str, Any], pids: dict[Any, int], tids: dict[tuple[Any, Any], int]
) -> dict[str, Any]:
    args = event.get("args")
    if event["ph"] == "X" and isinstance(args, dict):
        # The viewer names a frame by its name and its arguments: a source file and a
        # per-call run id would split one op into one frame per call.
        kept = {k: v for k, v in args.items() if k not in NOISY_ARGS}
        event = {k: v for k, v in event.items() if k != "args"}
        if kept:
            event["args"] = kept
    key = (event.get("pid"), event.get("tid"))
    if key in tids:
        event = {**event, "tid": tids[key]}
    if event.get("pid") in pids:
        event = {**event, "pid": pids[event["pid"]]}
    return event


def _end(event: dict[str, Any]) -> float | None:
    ts, dur = event.get("ts"), event.get("dur")
    if (
        event.get("ph") != "X"
        or not isinstance(ts, int | float)
        or not isinstance(dur, int | float)
    ):
        return None
    return float(ts + dur)


def _after(event: dict[str, Any], moment: float | None) -> bool:
    """Whether a complete event begins after `moment` (None: nothing is after it)."""
    ts = event.get("ts")
    return (
        moment is not None
        and event.get("ph") == "X"
        and isinstance(ts, int | float)
        and ts > moment
    )


def _program_work(event: dict[str, Any]) -> bool:
    """A call of the jitted function, or one of its XLA ops: XLA may run a call's last op
    after the call has returned (dispatch is asynchronous), so both mark the program's end."""
    args = event.get("args")
    return str(event.get("name")).startswith(CALL) or (isinstance(args, dict) and "hlo_op" in args)


def viewer_trace(stored: bytes, max_bytes: int = VIEWER_MAX_BYTES) -> bytes:
    """The profiler's gzip Chrome trace as the viewer reads it, gzip again.

    Four changes, for the viewer only: events without a phase are dropped (the profiler
    ends its list with an empty `{}`, and the viewer refuses a trace with one: "Unrecognized
    format"); complete events lose the arguments in NOISY_ARGS; processes and threads are
    numbered so that the one that ran the most of the program opens first
    (`trace_threads.viewer_numbers`); and events that begin after the program's work
    ended (its last call, or its last XLA op, which may begin after that call returned)
    are left out: they are the profiler stopping (hundreds of milliseconds, which would
    shrink the calls to a sliver of the first view). Every other event, its times and
    names stay, so the thread numbered first is the busiest in the copy too.
    Raises TraceTooLarge past `max_bytes` inflated, ValueError for what is no Chrome trace.
    """
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(stored)) as source:
            raw = source.read(max_bytes + 1)
    except (OSError, EOFError) as exc:
        raise ValueError(f"the trace is not gzip: {exc}") from None
    if len(raw) > max_bytes:
        raise TraceTooLarge(f"the trace inflates to over {max_bytes:,} bytes")
    try:
        trace = json.loads(raw)
    except ValueError:
        raise ValueError("the trace is not JSON") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: it has no traceEvents list")
    pids, tids = viewer_numbers(events)
    ends = [_end(e) for e in events if isinstance(e, dict) and _program_work(e)]
    last_work = max((t for t in ends if t is not None), default=None)
    trace["traceEvents"] = [
        _for_viewer(e, pids, tids)
        for e in events
        if isinstance(e, dict) and "ph" in e and not _after(e, last_work)
    ]
    return gzip.compress(json.dumps(trace, separators=(",", ":")).encode(), compresslevel=6)
