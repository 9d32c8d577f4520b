"""What `boundary worker` reads from its options and environment before it starts: a
size it cannot read stops it, named, and a files folder set for it is the one it uses."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from app.cli import _worker_env
from app.settings import Settings
from workers.cli.worker import agent_config, build_parser, worker_command
from workers.compiler.jaxenv import jax_environment
from workers.files import files_folder

ARGS = ["--server", "http://127.0.0.1:9", "--token", "t" * 16]


def files_at(env: dict[str, str]) -> Path | None:
    """Where a worker started with `env` keeps the files its jobs fetch."""
    config = agent_config(build_parser().parse_args(ARGS), env)
    return files_folder(config.files_dir, config.cache_dir)


@pytest.mark.parametrize(
    ("name", "value"),
    [("BOUNDARY_MAX_JOB_BYTES", "2GiB"), ("BOUNDARY_FILES_MAX_BYTES", "1e9")],
)
def test_a_size_the_worker_cannot_read_is_named_not_ignored(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"^{name}: expected a positive number of bytes, got"):
        agent_config(build_parser().parse_args(ARGS), {name: value})


def test_the_worker_stops_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in jax_environment(os.environ):  # the command sets these: set back after
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("BOUNDARY_WORKER_PARENT", raising=False)
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # the test's logging stays
    monkeypatch.setenv("BOUNDARY_MAX_JOB_BYTES", "2GiB")
    assert worker_command([*ARGS, "--verbose"]) == 2  # verbose: httpx's level stays too
    assert capsys.readouterr().err == (
        "boundary worker: BOUNDARY_MAX_JOB_BYTES: expected a positive number of bytes, got '2GiB'\n"
    )


def test_a_files_folder_set_for_the_worker_comes_before_the_cache_folders_sibling(
    tmp_path: Path,
) -> None:
    cache = {"BOUNDARY_CACHE_DIR": str(tmp_path / "cache" / "jax")}
    assert files_at(cache) == tmp_path / "cache" / "files"
    both = {**cache, "BOUNDARY_FILES_DIR": str(tmp_path / "mine")}
    assert files_at(both) == tmp_path / "mine"


def test_a_worker_without_a_token_is_told_where_to_put_one() -> None:
    with pytest.raises(ValueError, match="give --token or set BOUNDARY_WORKER_TOKEN"):
        agent_config(build_parser().parse_args(ARGS[:2]), {})


def test_a_size_written_as_the_server_takes_it_reaches_local_workers_as_they_take_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BOUNDARY_MAX_JOB_BYTES", "2_147_483_648")  # pydantic reads that
    monkeypatch.setenv("BOUNDARY_FILES_MAX_BYTES", "+4096")
    env = _worker_env(Settings(DB=":memory:"))
    config = agent_config(build_parser().parse_args(ARGS), env)
    assert config.max_job_bytes == 2 * 1024**3
    assert env["BOUNDARY_FILES_MAX_BYTES"] == "4096"
