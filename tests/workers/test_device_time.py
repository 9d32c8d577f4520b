"""Device time read from real traces of the TPU v5e this project borrows.

The two `.xplane.pb` files in tests/workers/data were written by `jax.profiler` on that
chip (jax 0.10.2, libtpu 0.0.42.1): eleven calls of a 4096³ bfloat16 matmul and of a sum of
2²⁰ float32 values, each synced on the host. A plain reading of the same traces with
XProf gave 719 µs and 1.74 µs per call on the device.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workers.catalog.published import ruled
from workers.measure.device_time import device_times, module_name, profiled_pass, read_trace
from workers.protocol import (
    BoundaryId,
    DeviceOp,
    DeviceTime,
    JobSpec,
    Measurement,
    RunResult,
)
from workers.protocol.stats import summarize

DATA = Path(__file__).parent / "data"


def test_a_matmuls_span_on_the_chip_is_its_fusion() -> None:
    times = read_trace(str(DATA / "mm4096.xplane.pb"), "jit_matmul")
    assert times is not None and times.planes == ["/device:TPU:0"]
    assert len(times.spans_s) == 11
    assert statistics.median(times.spans_s) == pytest.approx(719.26e-6, rel=1e-3)
    names = [o.name for o in times.ops]
    assert names[0] == "fusion" and set(names) == {"fusion", "copy-start", "copy-done"}
    fusion = times.ops[0]
    assert fusion.calls == 11 and fusion.median_s == pytest.approx(719.2e-6, rel=1e-3)
    # The instructions of a call lie inside its span.
    assert sum(o.median_s for o in times.ops) <= max(times.spans_s)


def test_a_small_sum_is_microseconds_on_the_chip() -> None:
    times = read_trace(str(DATA / "sum1m.xplane.pb"), "jit_sum")
    assert times is not None
    assert statistics.median(times.spans_s) == pytest.approx(1.7425e-6, rel=1e-3)
    assert times.ops[0].name == "reduce_sum.7"


def _event(name: str, start_ns: int, duration_ns: int) -> SimpleNamespace:
    return SimpleNamespace(name=name, start_ns=start_ns, duration_ns=duration_ns, stats=[])


def _plane(name: str, calls: list[tuple[int, int]], ops: list[tuple[str, int, int]]) -> Any:
    modules = [_event("jit_step(42)", start, length) for start, length in calls]
    executed = [_event(f"%{op} = f32[8] fusion(%a)", start, length) for op, start, length in ops]
    lines = [SimpleNamespace(name="XLA Modules", events=modules)]
    lines.append(SimpleNamespace(name="XLA Ops", events=executed))
    return SimpleNamespace(name=name, lines=lines)


def test_each_devices_calls_count_once_on_a_host_with_two_chips() -> None:
    """Two device planes: every call on either is a call, and each device's instruction
    times stay in its own calls (a second plane once wrote into the first one's)."""
    first = _plane("/device:TPU:0", [(0, 100), (1000, 100)], [("a", 10, 50), ("a", 1010, 70)])
    on_second = [("a", 5, 200), ("a", 1005, 200), ("a", 2005, 200), ("b", 2100, 40)]
    second = _plane("/device:TPU:1", [(0, 300), (1000, 300), (2000, 300)], on_second)
    host = SimpleNamespace(name="/host:CPU", lines=[])
    times = device_times([host, first, second], "jit_step")
    assert times is not None and times.planes == ["/device:TPU:0", "/device:TPU:1"]
    assert times.spans_s == pytest.approx([1e-7, 1e-7, 3e-7, 3e-7, 3e-7])
    by_name = {op.name: op for op in times.ops}
    assert by_name["a"].calls == 5 and by_name["b"].calls == 1
    assert by_name["a"].median_s == pytest.approx(200e-9)  # of 50, 70, 200, 200, 200 ns
    assert by_name["b"].median_s == 0.0  # in one call of five


def test_another_programs_trace_has_no_device_time_for_this_one() -> None:
    assert read_trace(str(DATA / "sum1m.xplane.pb"), "jit_matmul") is None


def test_the_cpu_has_no_device_plane() -> None:
    import jax
    import jax.numpy as jnp

    f = jax.jit(jnp.sum).lower(jnp.ones(1024)).compile()
    x = jnp.ones(1024)
    assert profiled_pass(lambda: f(x).block_until_ready(), "jit_sum", calls=2) is None
    assert module_name(f.as_text()) == "jit_sum"
    assert module_name("not hlo") is None


def run_with(spans: list[float], ops: list[DeviceOp], calls: int) -> RunResult:
    job = JobSpec.model_validate({"workload": "matmul", "path": "jax-tpu"})
    stats = summarize(spans) if spans else None
    timed = Measurement(boundary=BoundaryId.DEVICE_TIME, samples_s=spans, stats=stats)
    return RunResult.model_validate(
        {
            "job": job.model_dump(mode="json"),
            "params": {},
            "valid": True,
            "environment": {
                "platform": "tpu",
                "device_kind": "TPU v5 lite",
                "device_count": 1,
                "jax_version": "0.10.2",
                "jaxlib_version": "0.10.2",
                "timestamp": "2026-12-06T00:00:00Z",
            },
            "measurements": [timed.model_dump(mode="json")],
            "device_time": DeviceTime(calls=calls, ops=ops).model_dump(mode="json"),
        }
    )


def test_the_server_bounds_what_a_worker_says_of_its_device_time() -> None:
    ops = [
        DeviceOp(name="fusion", median_s=7e-4, calls=99),
        DeviceOp(name="longer-than-the-program", median_s=5e-3, calls=2),
        DeviceOp(name="negative", median_s=-1e-6, calls=2),
    ]
    kept = ruled(run_with([7.2e-4, 7.3e-4], ops, calls=500)).device_time
    assert kept is not None and kept.calls == 2
    assert [(o.name, o.calls) for o in kept.ops] == [("fusion", 2)]
    # No device-time samples, no account of them.
    assert ruled(run_with([], ops, calls=2)).device_time is None


def chip_runs() -> dict[str, dict[str, Any]]:
    """Runs made on the TPU v5e this project borrows, as its server published them (the
    device tier's record; artifacts other than the optimized HLO cut short)."""
    lines = (DATA / "chip_runs.jsonl").read_text().splitlines()
    return {job["id"]: job["run"] for job in map(json.loads, lines)}


def test_a_chip_run_names_the_chips_own_target_and_its_prediction() -> None:
    """A job that names no target and ran on a real v5e is shown with the chip's own
    target (derived by the server from the registered device kind, whatever the worker
    says), its prediction for that target; its figures stand as the chip gave them."""
    from workers.catalog.published import published
    from workers.protocol import TargetReport

    posted = chip_runs()["946794ec6c4bd7e0"]  # a 2048³ float32 matmul at DEFAULT precision
    assert posted["correctness"]["arithmetic"] == "bf16x1" and posted["valid"]
    said = TargetReport(id="v6e:1x1", model="v6e", count=1, compiler="XLA:TPU", deviceless=True)
    run = RunResult.model_validate({**posted, "target": said.model_dump(mode="json")})
    run = run.model_copy(update={"prediction": run.prediction.model_copy(update={"target": "x"})})
    kept = published(run)
    assert kept.target is not None
    assert (kept.target.id, kept.target.model, kept.target.deviceless) == ("v5e:1x1", "v5e", False)
    assert kept.prediction is not None and kept.prediction.target == "v5e:1x1"
    assert kept.prediction.predicted_peak_bytes == kept.prediction.real_peak_bytes == 67108864
    # The same run said to come from a CPU is no chip's: no target, no prediction.
    env = run.environment.model_copy(update={"platform": "cpu", "device_kind": "cpu"})
    cpu = published(run.model_copy(update={"environment": env}))
    assert cpu.target is None and cpu.prediction is None
