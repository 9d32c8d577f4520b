"""The SQLite store (migrations, restarts, pruning) and job-to-worker matching."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from bench_fakes import capabilities

from app.dispatch.requirements import job_requirements, unmet
from app.store import SCHEMA_VERSION, NewRun, Store
from workers.protocol import Capabilities, JobSpec, JobStatus

SPEC = {"workload": "matmul", "path": "jax-cpu", "params": {"m": 8}}


def new_run(valid: bool = True) -> NewRun:
    return NewRun(
        result_json="{}",
        truncated=[],
        valid=valid,
        stage_seconds={"trace": 0.1, "lower": 0.2, "compile": 0.3},
        run_s=1.0,
        artifacts={"hlo": ("HloModule m", False)},
    )


def test_schema_is_migrated_once_and_wal_is_on(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "b.sqlite3"
    store = Store.open(db)
    assert store.schema_version() == SCHEMA_VERSION
    store.close()
    again = Store.open(db)  # a second open applies nothing and loses nothing
    assert again.schema_version() == SCHEMA_VERSION
    again.close()
    mode = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "b.sqlite3"
    Store.open(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RuntimeError, match="upgrade the server"):
        Store.open(db)


def test_every_state_change_survives_reopening(tmp_path: Path) -> None:
    db = tmp_path / "b.sqlite3"
    store = Store.open(db)
    store.upsert_worker("w-1", "one", capabilities(), 1.0)
    store.insert_job("j1", SPEC, {"path": "jax-cpu"}, "127.0.0.1", 10.0)
    store.insert_job("j2", SPEC, {"path": "jax-cpu"}, "127.0.0.1", 11.0)
    assert store.claim("j1", "w-1", "lease-1", 50.0, 12.0) == 1
    assert store.claim("j1", "w-2", "lease-2", 50.0, 12.0) is None  # taken already
    assert store.finish_job("j1", 1, "w-1", new_run(), 13.0)
    assert not store.finish_job("j1", 1, "w-1", new_run(), 14.0)  # twice is harmless
    store.close()

    store = Store.open(db)
    j1, j2 = store.get_job("j1"), store.get_job("j2")
    assert j1 is not None and j1.status == JobStatus.DONE and j1.attempts == 1
    assert j2 is not None and j2.status == JobStatus.QUEUED
    run = store.get_run("j1")
    assert run is not None and run.artifact_names == ["hlo"]
    assert store.get_artifact("j1", "hlo") == ("HloModule m", False)
    assert [e[0] for e in store.job_events("j1")] == ["queued", "running", "done"]
    assert store.list_workers()[0].current_job is None
    store.close()


def test_old_runs_are_pruned_beyond_retain_runs(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "b.sqlite3", retain_runs=3)
    for i in range(5):
        store.insert_job(f"j{i}", SPEC, {"path": "jax-cpu"}, None, float(i))
        store.finish_job(f"j{i}", 1, "w", new_run(), float(i))
    assert store.count_runs() == 3
    assert store.get_run("j0") is None and store.get_artifact("j0", "hlo") is None
    assert store.get_run("j4") is not None
    store.close()


def caps(platform: str = "cpu", **changes: object) -> Capabilities:
    return Capabilities.model_validate(capabilities(platform, **changes))


def req(
    path: str, devices: int = 1, stages: tuple[str, ...] = ("compile", "execute")
) -> dict[str, object]:
    spec = JobSpec.model_validate({"workload": "matmul", "path": path, "stages": list(stages)})
    return dict(job_requirements(spec, devices))


def test_jax_gpu_never_matches_a_cpu_worker() -> None:
    assert unmet(req("jax-gpu"), caps("cpu")) == "its platform is cpu, the job needs gpu"
    assert unmet(req("jax-gpu"), caps("gpu")) is None
    assert unmet(req("jax-tpu"), caps("gpu")) is not None
    assert unmet(req("jax-tpu"), caps("tpu")) is None
    assert unmet(req("jax-cpu"), caps("gpu")) is not None


def test_devices_may_be_virtual_only_on_jax_cpu() -> None:
    assert unmet(req("jax-cpu", 4), caps("cpu", max_virtual_devices=8)) is None
    assert unmet(req("jax-cpu", 16), caps("cpu", max_virtual_devices=8)) is not None
    assert unmet(req("jax-cpu", 2), caps("cpu", max_virtual_devices=0)) is not None
    assert unmet(req("jax-gpu", 2), caps("gpu", device_count=1)) == (
        "has 1 device(s), the job needs 2"
    )
    assert unmet(req("jax-gpu", 2), caps("gpu", device_count=8)) is None


def test_cuda_needs_compile_or_run_tools() -> None:
    compile_only = req("cuda", stages=("compile",))
    execute = req("cuda")
    nvcc_only = caps("cpu", cuda_compile=True, paths=["jax-cpu", "cuda"])
    assert unmet(compile_only, nvcc_only) is None
    assert unmet(execute, nvcc_only) is not None
    assert unmet(compile_only, caps("cpu")) is not None
    assert unmet(compile_only, caps("cpu", cuda_compile=True)) == "does not offer the cuda path"
    gpu = caps("gpu", cuda_compile=True, cuda_run=True, paths=["jax-gpu", "cuda"])
    assert unmet(execute, gpu) is None
