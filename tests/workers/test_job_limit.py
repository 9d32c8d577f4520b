"""The job limit follows the host's memory (workers.catalog.job_limit), read alike by the
server, `boundary run` and a worker. Before: a fixed 2 GiB, on a host of 40 GB too."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from workers.catalog.job_limit import (
    FLOOR_BYTES,
    MAX_JOB_BYTES_ENV,
    cgroup_limit,
    default_job_bytes,
    host_job_bytes,
    job_limit,
)
from workers.cli.run import _settings
from workers.cli.worker import agent_config, build_parser

GB, GiB, MiB = 10**9, 2**30, 2**20
HOST_40GB = 40 * GB


def test_the_default_is_half_the_hosts_memory_and_never_under_2_gib() -> None:
    assert default_job_bytes(HOST_40GB) == 20 * GB
    assert default_job_bytes(40 * GiB) == 20 * GiB
    assert default_job_bytes(3 * GiB) == FLOOR_BYTES == 2 * GiB
    assert default_job_bytes(None) == FLOOR_BYTES  # memory that cannot be read


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
