"""The job limit follows the host's memory (workers.catalog.job_limit), and the peak model
of a dense product follows its check (workers.catalog.product_check): an 8192³ or 16384³
bfloat16 matmul, in latency or throughput mode, is admitted by the default limit of a
40 GB host, by the server as by `boundary run` and a worker.

Before: a fixed 2 GiB limit, and an 8192³ bfloat16 matmul estimated at 2.28 GB for its
float64 reference (float64 inputs alone 1.07 GB) was refused on a host with 40 GB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.queue.validation import JobRefused, validate_job
from app.settings import Settings
from workers.catalog import CatalogError, check_live_outputs, check_peak, parse_params
from workers.catalog.job_limit import (
    FLOOR_BYTES,
    MAX_JOB_BYTES_ENV,
    cgroup_limit,
    default_job_bytes,
    host_job_bytes,
    job_limit,
)
from workers.catalog.peak import BLOCK_BYTES, dense_peak
from workers.cli.run import _settings
from workers.cli.worker import agent_config, build_parser
from workers.protocol import JobSpec

GB, GiB, MiB = 10**9, 2**30, 2**20
HOST_40GB = 40 * GB


def matmul_job(size: int, mode: str) -> dict[str, Any]:
    shape = {"m": size, "n": size, "k": size, "dtype": "bfloat16"}
    return {"workload": "matmul", "path": "jax-tpu", "params": shape, "measure": {"mode": mode}}


def test_the_default_is_half_the_hosts_memory_and_never_under_2_gib() -> None:
    assert default_job_bytes(HOST_40GB) == 20 * GB
    assert default_job_bytes(40 * GiB) == 20 * GiB
    assert default_job_bytes(3 * GiB) == FLOOR_BYTES == 2 * GiB
    assert default_job_bytes(None) == FLOOR_BYTES  # memory that cannot be read


@pytest.mark.parametrize("size", [8192, 16384])
@pytest.mark.parametrize("mode", ["latency", "throughput"])
def test_large_bfloat16_matmuls_are_admitted_on_a_40_gb_host(size: int, mode: str) -> None:
    cap = default_job_bytes(HOST_40GB)
    data = matmul_job(size, mode)
    spec = JobSpec.model_validate(data)
    params = parse_params("matmul", data["params"], cap)
    check_peak(params, spec, cap)  # as `boundary run` and a worker check it
    check_live_outputs(params, spec.measure, cap)
    assert validate_job(data, cap).spec.params["m"] == size  # as the server checks it


def test_the_peak_figures_of_the_large_matmuls() -> None:
    """On jax-cpu, placed arrays and XLA's float32 temporaries of a narrow product are host
    memory; on a chip they are the chip's, so these overstate a TPU host's use."""
    expected = {
        (8192, 1): (1_551_892_480, "the projected check"),
        (8192, 10): (2_684_354_560, "sampling"),
        (16384, 1): (5_989_466_112, "the projected check"),
        (16384, 10): (10_737_418_240, "sampling"),
    }
    for (size, alive), (total, phase) in expected.items():
        peak = parse_params("matmul", matmul_job(size, "latency")["params"]).peak(alive)
        assert (peak.total, peak.phase) == (total, phase)
        assert "float64 inputs" not in peak.parts


def test_the_projected_check_holds_no_float64_copy_of_an_operand() -> None:
    peak = parse_params("matmul", {"m": 16384, "n": 16384, "k": 16384}).peak()
    assert peak.phase == "the projected check"
    assert peak.parts["a float64 block of rows"] == BLOCK_BYTES
    assert peak.parts["projections"] < 20 * MiB
    assert peak.parts["output"] == 4 * 16384**2


def test_a_small_product_keeps_the_exact_checks_model() -> None:
    params = parse_params("matmul", {"m": 512, "n": 256, "k": 128})
    inputs, output = 4 * (512 * 128 + 128 * 256), 4 * 512 * 256
    assert params.peak(3) == dense_peak(inputs, output, 4, 3)
    assert params.peak().phase == "the correctness check"


def test_a_sharded_product_counts_every_devices_copy() -> None:
    """sharding=gathered replicates the output: each of 8 devices holds all of it."""
    params = parse_params(
        "sharded-matmul",
        {"m": 1024, "n": 1024, "k": 1024, "sharding": "gathered", "devices": 8},
    )
    sampling = params.peak(10)
    assert sampling.phase == "sampling" and sampling.parts["outputs"] == 10 * 8 * 4 * 1024**2


def test_a_small_host_still_refuses_a_large_throughput_job_naming_its_limit() -> None:
    data = matmul_job(8192, "throughput")
    with pytest.raises(JobRefused) as refused:
        validate_job(data, default_job_bytes(4 * GiB))
    ((field, message),) = refused.value.problems
    assert field == "params"
    assert "needs about 2.68 GB at its peak (sampling; outputs alone 1.34 GB)" in message
    assert "over this server's limit of 2.15 GB (2,147,483,648 bytes)" in message
    spec, params = JobSpec.model_validate(data), parse_params("matmul", data["params"])
    with pytest.raises(CatalogError, match="BOUNDARY_MAX_JOB_BYTES"):
        check_peak(params, spec, FLOOR_BYTES)


def test_a_set_limit_wins_and_a_bad_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert job_limit({MAX_JOB_BYTES_ENV: "1000"}) == 1000
    assert job_limit({}) == host_job_bytes() >= FLOOR_BYTES
    with pytest.raises(ValueError, match=f"^{MAX_JOB_BYTES_ENV}: expected a positive number"):
        job_limit({MAX_JOB_BYTES_ENV: "2GiB"})
    monkeypatch.delenv(MAX_JOB_BYTES_ENV)  # the tests set it (tests/conftest.py)
    assert host_job_bytes() == Settings(DB=":memory:").MAX_JOB_BYTES  # the server
    assert _settings()[1] == host_job_bytes()  # `boundary run`
    worker = agent_config(
        build_parser().parse_args(["--server", "http://server"]), {"BOUNDARY_WORKER_TOKEN": "t"}
    )
    assert worker.max_job_bytes == host_job_bytes()  # a worker


def test_a_control_groups_limit_counts_where_it_is_less(tmp_path: Path) -> None:
    own = tmp_path / "cgroup"
    root = tmp_path / "fs"
    (root / "work" / "job").mkdir(parents=True)
    (root / "memory.max").write_text("max\n")
    (root / "work" / "memory.max").write_text(f"{8 * GiB}\n")
    (root / "work" / "job" / "memory.max").write_text("max\n")
    own.write_text("0::/work/job\n")
    assert cgroup_limit(own, root) == 8 * GiB  # a parent's limit binds its children
    v1 = root / "memory" / "box"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{3 * GiB}\n")
    own.write_text("4:memory:/box\n0::/\n")
    assert cgroup_limit(own, root) == 3 * GiB
    own.write_text("4:cpu:/box\n")
    assert cgroup_limit(own, root) is None
    assert cgroup_limit(tmp_path / "absent", root) is None
