"""run_job under the measurement contract: boundaries, caches, paths and honesty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from workers.catalog import CatalogError
from workers.compiler.compile_cache import apply_cache_policy
from workers.compiler.environment import available_paths
from workers.measure.faults import perturbed
from workers.protocol import (
    MODE_BOUNDARIES,
    BoundaryId,
    CachePolicy,
    JobSpec,
    Mode,
    PathId,
    ProgressEvent,
    RunResult,
)
from workers.run.engine import PathUnavailable, run_job


@pytest.fixture
def cold_afterwards(tmp_path: Path) -> Iterator[None]:
    """Leave the process's compilation caches cold after a test that changes them."""
    yield
    apply_cache_policy(CachePolicy.COLD, tmp_path)


@pytest.mark.parametrize("mode", list(Mode))
def test_each_mode_reports_its_own_boundaries(mode: Mode, job: Callable[..., JobSpec]) -> None:
    run = run_job(job("matmul", mode=mode.value, samples=4, calls_per_sample=3))
    assert [m.boundary for m in run.measurements] == list(MODE_BOUNDARIES[mode])
    for m in run.measurements:
        assert len(m.samples_s) == 4
        assert m.stats is not None and m.stats.rounds == 4
        assert all(s > 0 for s in m.samples_s)
    main = {
        Mode.LATENCY: BoundaryId.HOST_SYNC,
        Mode.THROUGHPUT: BoundaryId.HOST_THROUGHPUT,
        Mode.APPLICATION: BoundaryId.APPLICATION,
    }
    assert run.rates is not None
    if mode is Mode.DISPATCH:
        # Dispatch time is a teaching demo: flagged, and never turned into a speed.
        assert run.rates.flops_per_s is None and run.rates.boundary is None
        assert run.measurements[0].note and "never a speed" in run.measurements[0].note
        assert any("not the work finishing" in w for w in run.warnings)
    else:
        assert run.rates.boundary is main[mode]
        assert run.rates.flops_per_s is not None and run.rates.flops_per_s > 0
    if mode is Mode.THROUGHPUT:
        assert run.measurements[0].calls_per_sample == 3


def test_compile_only_takes_no_samples(job: Callable[..., JobSpec]) -> None:
    spec = JobSpec.model_validate(
        {**job("attention").model_dump(mode="json"), "stages": ["compile"]}
    )
    run = run_job(spec)
    assert run.measurements == [] and run.correctness is None and run.valid
    assert run.artifacts.hlo is not None and run.stage_seconds.compile is not None


def test_progress_phases_arrive_in_order(job: Callable[..., JobSpec]) -> None:
    events: list[ProgressEvent] = []
    run_job(job("reduction", samples=30), events.append)
    phases = [e.phase for e in events]
    first = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert first == ["traced", "lowered", "compiled", "warm-up", "sampling", "checked", "done"]
    sampling = [e for e in events if e.phase == "sampling"]
    assert sampling[-1].k == 30 and sampling[-1].n == 30


def test_auto_sampling_records_why_it_stopped(job: Callable[..., JobSpec]) -> None:
    run = run_job(job("elementwise", samples="auto", auto_rel_iqr=1.0))
    (m,) = run.measurements
    # The rule is first tried at 10 samples; on a busy machine the spread may need more.
    assert len(m.samples_s) >= 10
    assert m.stopped_because is not None and "IQR/median" in m.stopped_because
    assert m.stopped_because.endswith(f"after {len(m.samples_s)} samples")
    capped = run_job(job("elementwise", samples="auto", auto_rel_iqr=1e-9, auto_max_samples=25))
    (c,) = capped.measurements
    # The cap counts every sample taken; those discarded while the timings settled are
    # not kept, and the reason then says how many were.
    assert len(c.samples_s) + c.warmup_discarded == 25
    kept = f": kept the last {len(c.samples_s)}" if c.warmup_discarded else ""
    assert c.stopped_because == f"reached the cap of 25 samples{kept}"


def test_perturbed_output_fails_and_hides_the_speed(job: Callable[..., JobSpec]) -> None:
    with perturbed(0.05):
        run = run_job(job("matmul"))
    assert not run.valid
    assert run.correctness is not None and not run.correctness.passed
    assert run.correctness.error == pytest.approx(0.05, rel=1e-3)
    assert run.rates is not None and run.rates.flops_per_s is None
    assert run.rates.bytes_per_s is None
    for m in run.measurements:
        assert m.stats is None and m.note and "withheld" in m.note
        assert m.samples_s == []  # raw samples are withheld too: no row in samples.csv
    assert any("correctness failed" in w for w in run.warnings)


def test_nan_never_passes(job: Callable[..., JobSpec]) -> None:
    with perturbed(float("nan")):
        run = run_job(job("gather"))
    assert not run.valid and run.correctness is not None
    assert run.correctness.error is None
    assert run.correctness.detail is not None and "NaN" in run.correctness.detail


def test_wrong_path_is_refused_naming_what_was_found(job: Callable[..., JobSpec]) -> None:
    spec = job("matmul").model_copy(update={"path": PathId.JAX_GPU})
    with pytest.raises(PathUnavailable, match=r"path jax-gpu needs a gpu device; .*cpu ×1"):
        run_job(spec)
    with pytest.raises(PathUnavailable, match="needs an NVIDIA GPU"):
        run_job(job("matmul").model_copy(update={"path": PathId.CUDA}))
    with pytest.raises(CatalogError, match="path: gather does not run on cuda"):
        run_job(job("gather").model_copy(update={"path": PathId.CUDA}))
    assert available_paths() == [PathId.JAX_CPU]


def test_bad_parameters_raise_before_anything_runs(job: Callable[..., JobSpec]) -> None:
    spec = job("matmul").model_copy(update={"params": {"m": 1 << 20}})
    with pytest.raises(CatalogError, match=r"params\.m") as caught:
        run_job(spec)
    assert caught.value.field == "params.m"
    with pytest.raises(CatalogError, match=r"over this server.s limit"):
        run_job(job("matmul"), max_bytes=100)


def test_environment_is_recorded(job: Callable[..., JobSpec]) -> None:
    env = run_job(job("matmul", samples=1)).environment
    assert (env.platform, env.device_count) == ("cpu", 1)
    assert env.jax_version and env.jaxlib_version and env.timestamp
    assert env.cache is CachePolicy.COLD and env.precision is not None
    assert env.host_cpu


def test_cold_recompiles_and_warm_reuses(job: Callable[..., JobSpec]) -> None:
    # `warm` reuses what an earlier warm run compiled (a cold compile carries the memory
    # dump's folder in its options, so its executable is cached under another key).
    cold = run_job(job("reduction", {"rows": 40}, samples=1))
    run_job(job("reduction", {"rows": 40}, samples=1, cache="warm"))
    warm = run_job(job("reduction", {"rows": 40}, samples=1, cache="warm"))
    again = run_job(job("reduction", {"rows": 40}, samples=1, cache="cold"))
    assert warm.environment.cache is CachePolicy.WARM
    assert cold.stage_seconds.compile is not None and again.stage_seconds.compile is not None
    assert warm.stage_seconds.compile is not None
    # Reused executables come back in microseconds; cold ones are compiled again.
    assert warm.stage_seconds.compile < 0.2 * min(
        cold.stage_seconds.compile, again.stage_seconds.compile
    )
    assert again.environment.cache_events is not None
    assert again.environment.cache_events.hits == 0


def test_persistent_cache_misses_then_hits(
    tmp_path: Path, job: Callable[..., JobSpec], cold_afterwards: None
) -> None:
    spec = job("matmul", {"m": 24}, samples=1, cache="persistent")
    first = run_job(spec, cache_dir=tmp_path)
    second = run_job(spec, cache_dir=tmp_path)
    assert first.environment.cache is CachePolicy.PERSISTENT
    assert first.environment.cache_events is not None
    assert first.environment.cache_events.misses >= 1 and first.environment.cache_events.hits == 0
    assert second.environment.cache_events is not None
    assert second.environment.cache_events.hits >= 1
    assert second.environment.cache_events.time_saved_s is not None
    assert any(tmp_path.iterdir())


@pytest.mark.slow
def test_persistent_cache_hits_in_a_second_process(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "workers.cli", "run", "matmul", "m=16", "n=16", "k=16",
        "--samples", "1", "--cache", "persistent", "--json",
    ]  # fmt: skip
    env = {**os.environ, "BOUNDARY_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        runs.append(RunResult.model_validate(json.loads(done.stdout)))
    first, second = (r.environment.cache_events for r in runs)
    assert first is not None and second is not None
    assert first.misses >= 1 and first.hits == 0
    assert second.hits >= 1 and second.misses == 0
