"""Which thread of a profiler trace the timeline opens on, and the order of the others.

The vendored viewer (speedscope) makes one profile per (pid, tid) of a Chrome trace, sorts
them by those two numbers and opens the first. The profiler's numbers are its own: a
process id per XPlane and arbitrary thread ids, so left alone the viewer would open on
whichever thread got the lowest (on a GPU or TPU run, a host thread that only shows the
call and `block_until_ready`). The viewer's copy of the trace is numbered again instead:

1. the thread that did the most of the compiled program's work opens first (`busiest`),
   its process before the others;
2. then the process's other threads that did some of it, the busiest first;
3. then the thread that called the jitted function;
4. then every other thread in the profiler's own order (its `thread_sort_index`, where a
   process's are distinct), processes by their `process_sort_index`.

Names are not touched, so the viewer still heads each thread with its process and thread
names; only the numbers in brackets change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CALL = "PjitFunction("
"""How the profiler names a call of a jitted function (on the thread that made it)."""

DEVICE_PROCESS = "/device:"
"""How the profiler names a device's process (`/device:GPU:0`, `/device:TPU:0`)."""

NOT_A_DEVICE = "/device:CUSTOM"
"""A process named like a device that is none (`/device:CUSTOM:Megascale Trace`)."""

OP_LINE = "XLA Ops"
"""The thread (a "line") on which the profiler puts a device's XLA ops, one event each."""

Thread = tuple[Any, Any]
"""(pid, tid) as the trace spells them."""


def _complete(events: Iterable[Any]) -> Iterable[dict[str, Any]]:
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X":
            yield event


def _metadata(events: Iterable[Any], name: str) -> dict[Any, Any]:
    """pid, or (pid, tid) for thread metadata, → the value of one kind of metadata event."""
    found: dict[Any, Any] = {}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "M" or event.get("name") != name:
            continue
        args = event.get("args")
        value = args.get("name", args.get("sort_index")) if isinstance(args, dict) else None
        key = (
            (event.get("pid"), event.get("tid")) if name.startswith("thread") else event.get("pid")
        )
        if value is not None:
            found[key] = value
    return found


def _duration(event: dict[str, Any]) -> float:
    dur = event.get("dur")
    return float(dur) if isinstance(dur, int | float) and dur > 0 else 0.0


def device_work(events: list[Any]) -> dict[Thread, tuple[float, float, float]]:
    """(pid, tid) → how much of the compiled program it ran, in µs, as a sort key:

    - time in XLA ops on a device (events naming an `hlo_op`, or on a device's "XLA Ops"
      line), which comes first because a GPU's host threads name their ops too, for the
      launches;
    - any time on a device's process (a GPU stream's copies, a TPU's steps);
    - time in XLA ops on the host (XLA:CPU runs its ops on a pool of host threads).
    """
    processes = _metadata(events, "process_name")
    threads = _metadata(events, "thread_name")
    work: dict[Thread, tuple[float, float, float]] = {}
    for event in _complete(events):
        key = (event.get("pid"), event.get("tid"))
        name = str(processes.get(key[0], ""))
        on_device = name.startswith(DEVICE_PROCESS) and not name.startswith(NOT_A_DEVICE)
        args = event.get("args")
        is_op = (isinstance(args, dict) and "hlo_op" in args) or threads.get(key) == OP_LINE
        us = _duration(event)
        device_op, device, host_op = work.get(key, (0.0, 0.0, 0.0))
        work[key] = (
            device_op + (us if on_device and is_op else 0.0),
            device + (us if on_device else 0.0),
            host_op + (us if is_op and not on_device else 0.0),
        )
    return work


def busiest(work: dict[Thread, tuple[float, float, float]]) -> Thread | None:
    """The thread that did the most of the compiled program's work (a `device_work`), or
    None when none did any (a trace of the host alone)."""
    first = max(work, key=lambda k: work[k], default=None)
    return first if first is not None and any(work[first]) else None


def callers(events: list[Any]) -> set[Thread]:
    """The threads that called the jitted function."""
    return {
        (e.get("pid"), e.get("tid"))
        for e in _complete(events)
        if str(e.get("name")).startswith(CALL)
    }


def _number(value: Any) -> tuple[int, float | str]:
    """A sort key for an id the trace may spell as a number or as text."""
    return (0, value) if isinstance(value, int | float) else (1, str(value))


def _distinct(sort_index: dict[Any, Any]) -> dict[Any, Any]:
    """Keep a process's thread sort indexes only where they tell its threads apart."""
    by_pid: dict[Any, list[Any]] = {}
    for (pid, _), index in sort_index.items():
        by_pid.setdefault(pid, []).append(index)
    return {
        key: index
        for key, index in sort_index.items()
        if isinstance(index, int) and len(set(by_pid[key[0]])) == len(by_pid[key[0]])
    }


def viewer_numbers(events: list[Any]) -> tuple[dict[Any, int], dict[Thread, int]]:
    """New pids (original pid → 1, 2, …) and tids ((pid, tid) → 0, 1, … within its
    process) that put the threads in the order the module docstring gives."""
    work = device_work(events)
    first = busiest(work)
    calling = callers(events)
    process_index = _metadata(events, "process_sort_index")
    thread_index = _distinct(_metadata(events, "thread_sort_index"))
    keys = {
        (e.get("pid"), e.get("tid"))
        for e in events
        if isinstance(e, dict) and "pid" in e and "tid" in e
    }
    pids = {pid for pid, _ in keys} | set(process_index)

    def process_rank(pid: Any) -> tuple[Any, ...]:
        index = process_index.get(pid)
        return (
            first is None or pid != first[0],
            not isinstance(index, int),
            index or 0,
            _number(pid),
        )

    def thread_rank(key: Thread) -> tuple[Any, ...]:
        index = thread_index.get(key)
        busy = tuple(-us for us in work.get(key, (0.0, 0.0, 0.0)))
        return (key != first, busy, key not in calling, index is None, index or 0, _number(key[1]))

    new_pids = {pid: n for n, pid in enumerate(sorted(pids, key=process_rank), start=1)}
    new_tids: dict[Thread, int] = {}
    for pid in new_pids:
        mine = sorted((k for k in keys if k[0] == pid), key=thread_rank)
        new_tids.update({key: n for n, key in enumerate(mine)})
    return new_pids, new_tids
