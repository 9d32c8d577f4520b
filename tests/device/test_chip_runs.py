"""Catalog runs on a real TPU chip, submitted through the API to the worker that holds it.

Each run must pass its check at the arithmetic the chip ran its products at, report the
chip's own time per call beside host-sync, carry what a compile for the chip's target
without the device carries (bundles, a memory report, estimated cycles in the HLO), and
hold that compile's prediction beside the real one, equal where they should be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.device.conftest import Chip, ChipServer, stats

pytestmark = pytest.mark.device

CATALOG: list[tuple[str, dict[str, Any], str | None]] = [
    ("matmul", {"m": 2048, "n": 2048, "k": 2048}, "bf16x1"),
    ("matmul", {"m": 2048, "n": 2048, "k": 2048, "precision": "highest"}, "bf16x6"),
    ("elementwise", {"n": 1 << 24}, None),
    ("reduction", {"rows": 16, "cols": 1 << 16}, None),
    ("attention", {}, "bf16x1"),
]
SMALLER = {"m": 128, "n": 128, "k": 128, "rows": 16, "cols": 1024}


def body(chip: Chip, workload: str, params: dict[str, Any], **measure: Any) -> dict[str, Any]:
    """A job for the chip; on the CPU tier, at small sizes."""
    if not chip.on_tpu:
        params = {**params, **{k: v for k, v in SMALLER.items() if k in params}}
        params = {**params, "n": 4096} if workload == "elementwise" else params
    return {
        "workload": workload,
        "path": chip.path,
        "params": params,
        "measure": {"samples": 20, **measure},
    }


@pytest.mark.parametrize(("workload", "params", "arithmetic"), CATALOG)
def test_a_catalog_run_on_the_chip_is_checked_timed_and_predicted(
    *,
    chip: Chip,
    chip_server: ChipServer,
    record: Callable[..., None],
    keep: Callable[[dict[str, Any]], None],
    workload: str,
    params: dict[str, Any],
    arithmetic: str | None,
) -> None:
    job = chip_server.run(body(chip, workload, params))
    keep(job)
    run = job["run"]
    assert job["status"] == "done" and run is not None, job.get("reason")
    c = run["correctness"]
    times = stats(run)
    p = run.get("prediction")
    record(
        "catalog",
        job=job["id"],
        workload=workload,
        params=params,
        valid=run["valid"],
        error=c["error"],
        tolerance=c["tolerance"],
        arithmetic=c["arithmetic"],
        host_sync_us=times.get("host-sync", 0) * 1e6,
        device_us=times.get("device-time", 0) * 1e6,
        prediction=p,
        bundles=run["artifacts"].get("bundles") is not None,
        memory_report=run.get("memory_report") is not None,
    )
    assert run["valid"] and c["passed"], c["detail"]
    assert run["memory_report"] is not None
    if not chip.on_tpu:
        assert c["arithmetic"] == ("float32" if arithmetic else None)
        return
    assert c["arithmetic"] == arithmetic
    assert run["environment"]["device_kind"] == "TPU v5 lite"
    # The chip's own time, apart from the samples, and never longer than host-sync.
    assert 0 < times["device-time"] <= times["host-sync"]
    assert run["device_time"] and run["device_time"]["ops"]
    # What a compile for this chip's target without the device has, a run on it has too.
    assert run["artifacts"]["bundles"], "no bundles on a real TPU run"
    assert "estimated_cycles" in run["artifacts"]["hlo"]
    assert run["target"] and run["target"]["deviceless"] is False
    # The prediction: the same program, the same peak, to the byte.
    assert p is not None and p["refused"] is None, p
    assert p["target"] == run["target"]["id"] == "v5e:1x1"
    assert p["same_hlo"] is True
    assert p["predicted_peak_bytes"] == p["real_peak_bytes"] is not None


@pytest.mark.parametrize(("size", "mode"), [(8192, "latency")])
def test_the_big_matmuls_run_with_the_defaults(
    *,
    chip: Chip,
    chip_server: ChipServer,
    record: Callable[..., None],
    keep: Callable[[dict[str, Any]], None],
    size: int,
    mode: str,
) -> None:
    n = chip.size(size, size // 32)
    job = chip_server.run(
        {
            "workload": "matmul",
            "path": chip.path,
            "params": {"m": n, "n": n, "k": n, "dtype": "bfloat16"},
            "measure": {"mode": mode},
        }
    )
    keep(job)
    run = job["run"]
    assert job["status"] == "done" and run is not None, job.get("reason")
    c = run["correctness"]
    times = stats(run)
    main = "host-sync" if mode == "latency" else "host-throughput"
    tflops = 2 * n**3 / times[main] / 1e12 if main in times else None
    device = times.get("device-time")
    record(
        "big matmul",
        size=n,
        mode=mode,
        valid=run["valid"],
        tflops=tflops,
        device_tflops=2 * n**3 / device / 1e12 if device else None,
        reference=c["reference"],
        error=c["error"],
        tolerance=c["tolerance"],
    )
    assert run["valid"] and c["passed"], c["detail"]
    if chip.on_tpu:
        assert tflops is not None and tflops > 100  # the chip's bf16 peak is 197 TFLOP/s
