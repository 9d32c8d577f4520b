"""The SQLite file's mode, and job-to-worker matching (the store on both backends:
test_store_backends.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.dispatch.requirements import job_requirements, unmet
from app.store import Store
from tests.app.bench_fakes import capabilities
from workers.protocol import Capabilities, JobSpec


def test_the_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "b.sqlite3"
    Store.open(db).close()
    mode = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


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
