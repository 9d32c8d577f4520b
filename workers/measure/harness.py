"""Timing: the execute stage's sampling loops, one per measurement mode.

Every loop times only what its boundary names, with inputs already on the device and
ready, after an uncounted warm-up. The loops are written out by hand, not built from
shared callbacks, so the code inside each timed interval is as short as a bare loop's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import methodcaller
from typing import Any, cast

import jax
import numpy as np

from workers.measure.stopping import Stopper, measurement
from workers.protocol import (
    MODE_BOUNDARIES,
    BoundaryId,
    Measurement,
    MeasureOptions,
    Mode,
    ProgressEvent,
)

CompiledCall = Callable[..., Any]
"""A compiled function: calling it executes on the device and returns one array (a
catalog workload) or a list of arrays (an exported function with several results)."""

Ready = Callable[[Any], Any]
"""Waits until a call's result is ready."""

ONE_ARRAY: Ready = methodcaller("block_until_ready")
"""The wait for one array: its own method, as a bare loop calls it."""


def readiness(out: Any) -> Ready:
    """How to wait for results like `out`: one array's own method, or, for several,
    jax.block_until_ready over all of them (the interval ends when every one is ready)."""
    return ONE_ARRAY if isinstance(out, jax.Array) else jax.block_until_ready


def host_copy(out: Any) -> Any:
    """A call's result on the host: one NumPy array, or a list of them."""
    if isinstance(out, list | tuple):
        return [np.asarray(x) for x in out]
    return np.asarray(out)


ProgressSink = Callable[[ProgressEvent], None]

block_all = cast("Callable[[list[jax.Array]], list[jax.Array]]", jax.block_until_ready)
"""jax.block_until_ready for a list of arrays: one wait for all of them."""

PROGRESS_INTERVAL_S = 0.1
"""Sampling progress is reported at most this often (ten times a second)."""

DISPATCH_NOTE = (
    "host-dispatch times the call returning, not the work finishing: a teaching demo of "
    "asynchronous dispatch, never a speed."
)


class ProgressTicker:
    """Sends 'sampling' progress events, at most one per PROGRESS_INTERVAL_S: k of the
    samples asked for in hand (samples discarded while timings settle do not count)."""

    def __init__(self, sink: ProgressSink | None, stopper: Stopper, start: float) -> None:
        self.sink = sink
        self.stopper = stopper
        self.next_at = start + PROGRESS_INTERVAL_S

    def tick(self, count: int, now: float) -> None:
        """Report progress after `count` samples taken if the last report is old enough."""
        if self.sink is not None and now >= self.next_at:
            self.next_at = now + PROGRESS_INTERVAL_S
            self.finish(count)

    def finish(self, count: int) -> None:
        """Report the final count, whatever the throttle says."""
        if self.sink is not None:
            k = self.stopper.progress(count)
            self.sink(ProgressEvent(phase="sampling", k=k, n=self.stopper.target))


@dataclass
class Sampled:
    """What a sampling loop produced: its measurements and the last output it computed."""

    measurements: list[Measurement]
    output: Any
    warnings: list[str] = field(default_factory=list)
    untimed_s: float = 0.0
    """Work the loop did outside its intervals (waiting for dispatched calls, for example)."""


def warm_up(call: CompiledCall, args: Sequence[jax.Array], count: int) -> Any:
    """Run `call` `count` times, untimed, and return the last (ready) output."""
    out = call(*args)
    ready = readiness(out)
    ready(out)
    for _ in range(count - 1):
        out = call(*args)
        ready(out)
    return out


def warm_up_transfers(
    call: CompiledCall, host_inputs: Sequence[Any], device: Any, count: int
) -> list[str]:
    """The application path's warm-up: `count` untimed rounds of transfer-in, the call
    and transfer-out, so the first sample of each does not pay for allocating and
    mapping transfer buffers. Returns what it warmed, in order."""
    for _ in range(count):
        placed = block_all(jax.device_put(list(host_inputs), device))
        out = call(*placed)
        readiness(out)(out)
        host_copy(out)
        del placed, out
    return [BoundaryId.TRANSFER_IN.value, "call", BoundaryId.TRANSFER_OUT.value]


def sample_latency(
    call: CompiledCall,
    args: Sequence[jax.Array],
    options: MeasureOptions,
    progress: ProgressSink | None = None,
    ready: Ready = ONE_ARRAY,
) -> Sampled:
    """`host-sync`: each sample is one call, stopped when its result is ready."""
    clock = time.perf_counter
    samples: list[float] = []
    append = samples.append
    stopper = Stopper(options, clock())
    ticker = ProgressTicker(progress, stopper, clock())
    while True:
        t0 = clock()
        # The result is dropped inside the interval, exactly as in a bare loop, so its
        # memory is free for the next call to reuse.
        ready(call(*args))
        t1 = clock()
        append(t1 - t0)
        if stopper.done(samples, t1):
            break
        ticker.tick(len(samples), t1)
    ticker.finish(len(samples))
    t0 = clock()
    out = call(*args)  # one more, untimed call gives the output to check
    ready(out)
    found = measurement(BoundaryId.HOST_SYNC, samples, stopper)
    return Sampled([found], out, untimed_s=clock() - t0)


def sample_throughput(
    call: CompiledCall,
    args: Sequence[jax.Array],
    options: MeasureOptions,
    progress: ProgressSink | None = None,
    ready: Ready = ONE_ARRAY,
) -> Sampled:
    """`host-throughput`: each sample enqueues K calls, syncs once and is divided by K."""
    clock = time.perf_counter
    calls = options.calls_per_sample
    samples: list[float] = []
    append = samples.append
    stopper = Stopper(options, clock())
    ticker = ProgressTicker(progress, stopper, clock())
    outs: list[jax.Array] = []
    while True:
        outs = []
        t0 = clock()
        for _ in range(calls):
            outs.append(call(*args))
        block_all(outs)
        t1 = clock()
        append((t1 - t0) / calls)
        if stopper.done(samples, t1):
            break
        ticker.tick(len(samples), t1)
    ticker.finish(len(samples))
    found = measurement(BoundaryId.HOST_THROUGHPUT, samples, stopper, calls_per_sample=calls)
    return Sampled([found], outs[-1])


def sample_dispatch(
    call: CompiledCall,
    args: Sequence[jax.Array],
    options: MeasureOptions,
    progress: ProgressSink | None = None,
    ready: Ready = ONE_ARRAY,
) -> Sampled:
    """`host-dispatch`: call to return, without waiting for the work (a teaching demo)."""
    clock = time.perf_counter
    samples: list[float] = []
    append = samples.append
    stopper = Stopper(options, clock())
    ticker = ProgressTicker(progress, stopper, clock())
    waited = 0.0
    while True:
        t0 = clock()
        out = call(*args)
        t1 = clock()
        append(t1 - t0)
        ready(out)  # outside the interval: the next sample starts idle
        waited += clock() - t1
        if stopper.done(samples, t1):
            break
        ticker.tick(len(samples), t1)
    ticker.finish(len(samples))
    found = measurement(BoundaryId.HOST_DISPATCH, samples, stopper, note=DISPATCH_NOTE)
    return Sampled([found], out, warnings=[DISPATCH_NOTE], untimed_s=waited)


def sample_application(
    call: CompiledCall,
    host_inputs: Sequence[Any],
    device: Any,
    options: MeasureOptions,
    progress: ProgressSink | None = None,
    *,
    ready: Ready = ONE_ARRAY,
) -> Sampled:
    """The application path: host arrays in, result back on the host.

    Each sample times `transfer-in` (host → device, until ready) and `transfer-out`
    (device → host, from a fresh output, since an array caches its host copy), then,
    separately, `application`: the whole round trip as an application would write it.
    """
    clock = time.perf_counter
    put = jax.device_put
    all_placed = block_all
    inward: list[float] = []
    outward: list[float] = []
    whole: list[float] = []
    stopper = Stopper(options, clock())
    ticker = ProgressTicker(progress, stopper, clock())
    result: Any = None
    untimed = 0.0
    while True:
        t0 = clock()
        placed = all_placed(put(list(host_inputs), device))
        t1 = clock()
        inward.append(t1 - t0)
        out = call(*placed)
        ready(out)
        t2 = clock()
        untimed += t2 - t1
        host_copy(out)
        t3 = clock()
        outward.append(t3 - t2)
        del placed, out
        t4 = clock()
        result = host_copy(call(*put(list(host_inputs), device)))
        t5 = clock()
        whole.append(t5 - t4)
        if stopper.done(whole, t5):
            break
        ticker.tick(len(whole), t5)
    ticker.finish(len(whole))
    order = MODE_BOUNDARIES[Mode.APPLICATION]
    by_boundary = {
        BoundaryId.TRANSFER_IN: inward,
        BoundaryId.APPLICATION: whole,
        BoundaryId.TRANSFER_OUT: outward,
    }
    found = [measurement(boundary, by_boundary[boundary], stopper) for boundary in order]
    return Sampled(found, result, untimed_s=untimed)


def sample(
    mode: Mode,
    call: CompiledCall,
    *,
    args: Sequence[jax.Array],
    host_inputs: Sequence[Any],
    device: Any,
    options: MeasureOptions,
    progress: ProgressSink | None = None,
    ready: Ready = ONE_ARRAY,
) -> Sampled:
    """Run the sampling loop of `mode`. A wide spread, a stop at the time cap and the
    samples discarded while timings settled are fields of each measurement (its stats,
    `stopped_because`, `warmup_discarded`), never warnings: the gate withholds fields.
    `ready` waits for one call's result (`readiness` of a warm-up's output)."""
    if mode is Mode.LATENCY:
        found = sample_latency(call, args, options, progress, ready)
    elif mode is Mode.THROUGHPUT:
        found = sample_throughput(call, args, options, progress, ready)
    elif mode is Mode.DISPATCH:
        found = sample_dispatch(call, args, options, progress, ready)
    else:
        found = sample_application(call, host_inputs, device, options, progress, ready=ready)
    return found
