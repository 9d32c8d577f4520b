"""Every TPU generation compiled for without the hardware: libtpu states each target's
usable bytes when asked by compiling; the catalog (one-device workloads on v5e:1x1, scale
workloads on a multi-chip slice of v4, v5p and TPU7x) and an uploaded model compile with
bundles, a memory report and usable bytes beside the published HBM.

Real compiles (a few seconds each, with the bundles' child compile), so few and `slow`.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from workers.agent import idle
from workers.agent.idle import Idle
from workers.agent.runner_pool import RunnerPool
from workers.files import FileCache
from workers.protocol import JobSpec, RunResult, parse_target
from workers.run.engine import run_job
from workers.xla_targets import capacity

pytestmark = pytest.mark.slow

V5E_BYTES_LIMIT = 16_909_336_064
"""`memory_stats()["bytes_limit"]` of a real v5e chip (FACTS.md, checked on the chip)."""


def compiled_with_bundles_and_a_report(run: RunResult, target_id: str) -> None:
    """A deviceless TPU run as every generation must give it."""
    target = parse_target(target_id)
    assert run.job.path.value == "jax-tpu"  # the target named it
    assert run.target is not None and run.target.id == target_id and run.target.deviceless
    assert run.target.compiler == "libtpu" and run.artifacts.hlo
    assert run.artifacts.bundles and "// schedule: " in run.artifacts.bundles  # libtpu's LLO
    assert run.memory_report is not None and run.memory_report.peak_bytes > 0
    memory = run.target.memory
    assert memory is not None and memory.hbm_bytes == target.chip.device_hbm_bytes
    assert memory.usable_bytes is not None and 0 < memory.usable_bytes < 2 * memory.hbm_bytes
    assert memory.usable_source and target_id in memory.usable_source
    assert memory.fraction is not None and 0 < memory.fraction < 1


def test_libtpu_states_the_usable_bytes_a_real_v5e_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reading = capacity.read_capacity(parse_target("v5e:1x1"))
    assert reading.usable_bytes == V5E_BYTES_LIMIT  # to the byte
    assert reading.compiles < 40
    # v6e: libtpu's refusals say "31.25G"; the reading is the exact figure that rounds so.
    v6e = capacity.read_capacity(parse_target("v6e:1x1")).usable_bytes
    assert round(v6e / 2**30, 2) == 31.25 and v6e < 32 * 2**30
    # Kept per libtpu version and target, in a file every process of the machine reads.
    monkeypatch.setenv("HOME", str(tmp_path))
    capacity.usable_bytes.cache_clear()
    try:
        assert capacity.usable_bytes("v5e:1x1") == V5E_BYTES_LIMIT
        kept = json.loads(capacity.cache_file().read_text())
        assert [f"libtpu {reading.libtpu}"] == list(kept)
        assert kept[f"libtpu {reading.libtpu}"] == {"v5e:1x1": V5E_BYTES_LIMIT}
        assert capacity.usable_bytes("h100:1") is None  # a GPU's is JAX's share, not libtpu's
        # A worker reads what it has not (one at least, however short its round) and keeps it.
        found = capacity.read_missing(["v5e:1x1", "v5e:2x2", "v6e:1x1"], budget_s=0)
        assert found["v5e:1x1"] == V5E_BYTES_LIMIT and "v5e:2x2" in found
        assert found["v5e:2x2"] <= V5E_BYTES_LIMIT  # a larger slice keeps a little more
        assert set(capacity.cached_capacities()) == set(found)
    finally:
        capacity.usable_bytes.cache_clear()


def test_one_process_of_a_machine_reads_missing_targets_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers of one machine, idle together, would read the same targets side by side."""
    monkeypatch.setenv("HOME", str(tmp_path))  # this machine has read nothing yet
    capacity.usable_bytes.cache_clear()
    capacity.lock_file().parent.mkdir(parents=True)
    try:
        with capacity.lock_file().open("a") as held:  # another process reading
            fcntl.flock(held, fcntl.LOCK_EX)
            assert capacity.reading_elsewhere()
            assert capacity.read_missing(["v5e:1x1"], budget_s=0) == {}  # nothing read here
            caps = {"targets": ["v5e:1x1"], "capacities": {}}

            async def started(targets: list[str]) -> bool:
                raise AssertionError(f"a reading process was started for {targets}")

            monkeypatch.setattr(idle, "_read_apart", started)
            assert anyio.run(Idle(RunnerPool()).capacities, caps) is None
            assert not capacity.cache_file().exists()
        assert not capacity.reading_elsewhere()
        assert capacity.read_missing(["v5e:1x1"], budget_s=0) == {"v5e:1x1": V5E_BYTES_LIMIT}
    finally:
        capacity.usable_bytes.cache_clear()


@pytest.mark.parametrize(
    ("workload", "target", "params"),
    [
        ("matmul", "v5e:1x1", {"m": 512, "n": 512, "k": 512, "kernel": "pallas"}),
        ("sharded-matmul", "v4:2x2x1", {"m": 2048, "n": 2048, "k": 2048, "sharding": "tensor"}),
        ("sharded-matmul", "v5p:2x2x1", {"m": 2048, "n": 2048, "k": 2048, "sharding": "tensor"}),
        ("collective", "tpu7x:2x2x1", {}),
    ],
)  # fmt: skip
def test_the_catalog_compiles_on_every_generation(
    workload: str, target: str, params: dict[str, Any], tmp_path: Path
) -> None:
    job = JobSpec.model_validate({"workload": workload, "target": target, "params": params})
    run = run_job(job, cache_dir=tmp_path / "cache")
    compiled_with_bundles_and_a_report(run, target)
    if workload == "matmul":  # a Pallas kernel: Mosaic's own IR beside the bundles
        assert run.artifacts.mosaic and "tpu." in run.artifacts.mosaic
        return
    assert run.hlo_summary is not None
    reduce = next(c for c in run.hlo_summary.collectives if c.kind.startswith("all-reduce"))
    devices = parse_target(target).count  # 8 on v4 and TPU7x (two a chip), 4 on v5p
    assert reduce.groups is not None and sorted(d for g in reduce.groups for d in g) == list(
        range(devices)
    )


def test_an_uploaded_model_compiles_on_every_new_generation(
    own_exports: dict[str, Any], tmp_path: Path
) -> None:
    files = FileCache(tmp_path / "files")
    params = {"artifact": files.put(own_exports["forward"].artifact.read_bytes())}
    for target in ("v5e:1x1", "v5p:2x2x1", "tpu7x:2x2x1", "v4:2x2x1"):
        job = JobSpec.model_validate({"workload": "exported", "target": target, "params": params})
        run = run_job(job, files_dir=files.directory)
        compiled_with_bundles_and_a_report(run, target)
        if target != "v5e:1x1":  # exported for one device: one of the slice's
            assert run.target is not None and run.target.mesh is not None
            assert run.target.mesh.startswith(f"one device of {target}'s ")


def test_an_idle_worker_reads_the_rest_apart_from_its_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # this machine has read nothing yet
    caps = {"targets": ["v5e:1x1", "v5e:2x2", "h100:1"], "capacities": {}}
    idle = Idle(RunnerPool())
    fresh = anyio.run(idle.capacities, caps)
    assert fresh is not None and fresh["targets"] == caps["targets"]
    assert fresh["capacities"]["v5e:1x1"] == V5E_BYTES_LIMIT
    assert set(fresh["capacities"]) == {"v5e:1x1", "v5e:2x2"}  # a GPU's is not libtpu's
    assert anyio.run(idle.capacities, fresh) is None  # all read: nothing more to do
