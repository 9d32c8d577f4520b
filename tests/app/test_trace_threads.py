"""The thread the timeline opens on, in traces shaped as the profiler writes them for a GPU,
a TPU and a CPU run: the one that ran most of the compiled program, never the host thread
that only called it and waited (`block_until_ready`)."""

from __future__ import annotations

import gzip
import json
from typing import Any

from app.pages.runs.timeline import viewer_trace

HOST = 701


def process(pid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
        {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": sort_index}},
    ]


def thread(pid: int, tid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}},
        {
            "ph": "M",
            "pid": pid,
            "tid": tid,
            "name": "thread_sort_index",
            "args": {"sort_index": sort_index},
        },
    ]


def span(pid: int, tid: int, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def host_calls(ops: bool = False) -> list[dict[str, Any]]:
    """The host process: the Python thread calling the jitted function (and, on a GPU, the
    launch of each kernel, which names its op too and, for small kernels, takes longer than
    the kernel) and an idle thread with a lower id."""
    events = (
        process(HOST, "/host:CPU", HOST) + thread(HOST, 9, "python", 6) + thread(HOST, 3, "idle", 1)
    )
    for i in range(4):
        events.append(span(HOST, 9, "PjitFunction(jit(step))", 1000 * i, 900))
        events.append(span(HOST, 9, "$api.py:1 block_until_ready", 1000 * i + 50, 800))
        if ops:
            events.append(span(HOST, 9, "fusion.1", 1000 * i + 10, 200, hlo_op="fusion.1"))
    events.append(span(HOST, 3, "MutexLock", 10, 1))
    return events


def opened(events: list[dict[str, Any]]) -> tuple[str, str, list[str]]:
    """(process, thread) the viewer opens on, and the names of the events on it."""
    copy = json.loads(
        gzip.decompress(viewer_trace(gzip.compress(json.dumps({"traceEvents": events}).encode())))
    )
    kept = copy["traceEvents"]
    first = min((e["pid"], e["tid"]) for e in kept if e.get("ph") == "X")
    processes = {e["pid"]: e["args"]["name"] for e in kept if e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in kept if e.get("name") == "thread_name"
    }
    names = [e["name"] for e in kept if e.get("ph") == "X" and (e["pid"], e["tid"]) == first]
    return processes[first[0]], threads[first], names


def test_a_gpu_trace_opens_on_the_stream_that_ran_most_kernels_on_any_device() -> None:
    events = host_calls(ops=True)
    events += process(1, "/device:CUSTOM:Megascale Trace", 1)
    for pid, device in ((2, "/device:GPU:0"), (3, "/device:GPU:1")):
        events += process(pid, device, pid)
        events += thread(pid, 14, "Stream #14(MemcpyH2D)", 1) + thread(
            pid, 15, "Stream #15(Compute)", 2
        )
        events.append(span(pid, 14, "MemcpyH2D", 0, 300))  # long, but no op
        for i in range(4):
            width = 40 if pid == 2 else 90  # GPU:1 holds the larger shard
            events.append(
                span(
                    pid,
                    15,
                    "loop_fusion",
                    1000 * i + 40,
                    width,
                    hlo_op="fusion.1",
                    hlo_module="jit_step",
                )
            )
    assert opened(events) == (
        "/device:GPU:1",
        "Stream #15(Compute)",
        ["loop_fusion"] * 4,
    )


def test_a_tpu_trace_opens_on_its_xla_ops_not_the_modules_around_them() -> None:
    events = host_calls() + process(1, "/device:TPU:0", 1)
    events += thread(1, 1, "Steps", 1) + thread(1, 2, "XLA Modules", 2) + thread(1, 3, "XLA Ops", 3)
    for i in range(3):
        events.append(span(1, 1, "0", 1000 * i, 990))
        events.append(span(1, 2, "jit_step(123)", 1000 * i + 5, 980))
        events.append(span(1, 3, "fusion.2", 1000 * i + 10, 400))
        events.append(span(1, 3, "convolution.1", 1000 * i + 420, 500))
    assert opened(events) == ("/device:TPU:0", "XLA Ops", ["fusion.2", "convolution.1"] * 3)


def test_a_cpu_trace_opens_on_the_worker_thread_that_ran_most_ops() -> None:
    events = host_calls()
    for tid, name, ops in ((20, "tf_XLAPjRtCpuClient/1", 1), (21, "tf_XLAPjRtCpuClient/2", 3)):
        events += thread(HOST, tid, name, 7 + tid)
        for i in range(ops):
            events.append(
                span(
                    HOST,
                    tid,
                    "ynn_fusion",
                    1000 * i + 100,
                    60,
                    hlo_op="ynn_fusion",
                    hlo_module="jit_step",
                )
            )
    assert opened(events) == ("/host:CPU", "tf_XLAPjRtCpuClient/2", ["ynn_fusion"] * 3)


def test_a_trace_of_the_host_alone_opens_on_the_thread_that_made_the_calls() -> None:
    process_name, thread_name, names = opened(host_calls())
    assert (process_name, thread_name) == ("/host:CPU", "python")
    assert names.count("PjitFunction(jit(step))") == 4


def test_numbers_change_but_names_times_and_events_do_not() -> None:
    events = (
        host_calls(ops=True)
        + process(2, "/device:GPU:0", 2)
        + thread(2, 15, "Stream #15(Compute)", 1)
    )
    events.append(span(2, 15, "loop_fusion", 40, 50, hlo_op="fusion.1"))
    copy = json.loads(
        gzip.decompress(viewer_trace(gzip.compress(json.dumps({"traceEvents": events}).encode())))
    )
    kept = copy["traceEvents"]
    assert [(e["name"], e.get("ts"), e.get("dur")) for e in kept] == [
        (e["name"], e.get("ts"), e.get("dur")) for e in events
    ]
    # Every thread keeps its own number: two threads are never merged into one.
    before = {(e["pid"], e["tid"]) for e in events if "tid" in e}
    after = {(e["pid"], e["tid"]) for e in kept if "tid" in e}
    assert len(before) == len(after)
