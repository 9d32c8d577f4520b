"""A worker's own ceilings: measured on its device when it starts, sent with its capabilities."""

from __future__ import annotations

import jax
import pytest

from workers.agent.runner import CEILINGS_ENV, _capabilities
from workers.measure.ceilings import MATMUL_DTYPES, copy_bandwidth, measure_ceilings
from workers.protocol import Capabilities


def test_ceilings_are_measured_on_the_device() -> None:
    device = jax.devices()[0]
    found = measure_ceilings(device, budget_s=0.3, copy_bytes=8 * 1024 * 1024)
    assert found.device_kind == str(device.device_kind)
    assert found.copy_bytes == 8 * 1024 * 1024
    assert found.copy_bytes_per_s is not None and found.copy_bytes_per_s > 1e8
    assert set(found.matmul_flops_per_s) == set(MATMUL_DTYPES)
    assert all(rate > 1e7 for rate in found.matmul_flops_per_s.values())
    assert all(n >= 256 for n in found.matmul_sizes.values())
    assert found.seconds is not None and found.seconds < 10
    assert "best of 3 host-synced calls" in found.method and found.measured_at


def test_copy_bandwidth_counts_read_and_write() -> None:
    rate, size = copy_bandwidth(jax.devices()[0], 4 * 1024 * 1024)
    assert size == 4 * 1024 * 1024 and rate > 0


def test_the_runner_reports_them_with_its_capabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CEILINGS_ENV, "1")  # the default, which tests/conftest.py turns off
    caps = Capabilities.model_validate(_capabilities(0))
    assert caps.ceilings is not None
    assert caps.ceilings.device_kind == caps.device_kind
    assert caps.ceilings.copy_bytes_per_s and caps.ceilings.matmul_flops_per_s["float32"] > 0
    monkeypatch.setenv(CEILINGS_ENV, "0")
    assert _capabilities(0)["ceilings"] is None


def test_rounds_keep_the_best_of_each_figure() -> None:
    from workers.measure.ceilings import best_of
    from workers.protocol import Ceilings

    first = Ceilings(
        device_kind="cpu",
        copy_bytes_per_s=5e9,
        copy_bytes=1,
        matmul_flops_per_s={"float32": 1e11, "bfloat16": 4e10},
        matmul_sizes={"float32": 1024, "bfloat16": 512},
        measured_at="t0",
    )
    second = first.model_copy(
        update={
            "copy_bytes_per_s": 4e9,
            "matmul_flops_per_s": {"float32": 2e11, "bfloat16": 3e10},
            "matmul_sizes": {"float32": 2048, "bfloat16": 256},
            "measured_at": "t1",
        }
    )
    merged = best_of(first, second)
    assert merged.copy_bytes_per_s == 5e9
    assert merged.matmul_flops_per_s == {"float32": 2e11, "bfloat16": 4e10}
    assert merged.matmul_sizes == {"float32": 2048, "bfloat16": 512}
    assert (merged.rounds, merged.measured_at, merged.updated_at) == (2, "t0", "t1")
    assert "best of every round" in merged.method


def test_the_runner_measures_another_round_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.agent.runner import _remeasure

    monkeypatch.setenv(CEILINGS_ENV, "1")
    once = _capabilities(0)["ceilings"]
    again = _remeasure(once)
    assert again is not None and again["rounds"] == 2 and again["updated_at"]
    assert again["copy_bytes_per_s"] >= once["copy_bytes_per_s"]
