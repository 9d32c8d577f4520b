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

from app.web.security import VIEWER_PREFIX

VIEWER_MAX_BYTES = 64 * 1024 * 1024
"""The largest inflated trace rewritten for the viewer (it is parsed whole: several times
this in memory); a larger one is offered as a download only. The stored trace is at most
BOUNDARY_PROFILE_MAX_BYTES packed, and inflates at most 100 times that
(app.store.profiles.INFLATE_RATIO)."""

NOISY_ARGS = frozenset({"_src", "run_id"})
"""Event arguments the viewer's copy leaves out (the download keeps them)."""

KEYS_HELP = (
    "The viewer shows the trace up to the end of the last profiled call (the download also "
    "holds the profiler stopping). Keys: 1 time order · 2 left heavy (merged) · 3 sandwich "
    "(a table by self time) · n and p step through the threads · hover a frame for its duration"
)


CALL = "PjitFunction("
"""How the profiler names a call of a jitted function (on the thread that made it)."""


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


def thread_order(events: list[Any]) -> dict[tuple[Any, Any], int]:
    """(pid, tid) → the profiler's own `thread_sort_index`, where a process's are distinct.

    The viewer lists threads by (pid, tid) and opens the first. The profiler's thread ids
    are arbitrary numbers, so without this the first view would be whichever thread got the
    lowest id (often an idle one). Numbered by sort index they come in the order Perfetto
    shows them, except that the thread that called the jitted function comes first.
    Thread names are not touched.
    """
    found: dict[tuple[Any, Any], int] = {}
    for event in events:
        if (
            isinstance(event, dict)
            and event.get("ph") == "M"
            and event.get("name") == "thread_sort_index"
            and isinstance(event.get("args"), dict)
            and isinstance(event["args"].get("sort_index"), int)
        ):
            found[(event.get("pid"), event.get("tid"))] = event["args"]["sort_index"]
    by_pid: dict[Any, list[int]] = {}
    for (pid, _), index in found.items():
        by_pid.setdefault(pid, []).append(index)
    clashing = {pid for pid, indexes in by_pid.items() if len(set(indexes)) != len(indexes)}
    order = {key: index + 1 for key, index in found.items() if key[0] not in clashing}
    # The thread that made the jitted calls opens first: in a worker's runner the main
    # thread, sorted before it, holds only the profiler's own locking.
    calls = {
        (e.get("pid"), e.get("tid"))
        for e in events
        if isinstance(e, dict) and e.get("ph") == "X" and str(e.get("name")).startswith(CALL)
    }
    for key in calls & set(order):
        order[key] = 0
    return order


def _for_viewer(event: dict[str, Any], order: dict[tuple[Any, Any], int]) -> dict[str, Any]:
    args = event.get("args")
    if event["ph"] == "X" and isinstance(args, dict):
        # The viewer names a frame by its name and its arguments: a source file and a
        # per-call run id would split one op into one frame per call.
        kept = {k: v for k, v in args.items() if k not in NOISY_ARGS}
        event = {k: v for k, v in event.items() if k != "args"}
        if kept:
            event["args"] = kept
    key = (event.get("pid"), event.get("tid"))
    if key in order:
        event = {**event, "tid": order[key]}
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


def viewer_trace(stored: bytes, max_bytes: int = VIEWER_MAX_BYTES) -> bytes:
    """The profiler's gzip Chrome trace as the viewer reads it, gzip again.

    Four changes, for the viewer only: events without a phase are dropped (the profiler
    ends its list with an empty `{}`, and the viewer refuses a trace with one: "Unrecognized
    format"); complete events lose the arguments in NOISY_ARGS; threads are numbered in the
    profiler's own order (`thread_order`); and events that begin after the last call of
    the jitted function ended are left out: they are the profiler stopping (hundreds of
    milliseconds, which would shrink the calls to a sliver of the first view). Every other
    event, its times and names stay.
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
    order = thread_order(events)
    ends = [_end(e) for e in events if isinstance(e, dict) and str(e.get("name")).startswith(CALL)]
    last_call = max((t for t in ends if t is not None), default=None)
    trace["traceEvents"] = [
        _for_viewer(e, order)
        for e in events
        if isinstance(e, dict) and "ph" in e and not _after(e, last_call)
    ]
    return gzip.compress(json.dumps(trace, separators=(",", ":")).encode(), compresslevel=6)
