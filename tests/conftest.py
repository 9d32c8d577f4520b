"""Fixtures shared by every test: fresh settings and an in-process app per test, the
store's databases (a SQLite file, or a throwaway PostgreSQL cluster), and the real servers
that end-to-end tests share (tests/servers.py).

Session-scoped fixtures are per process: under pytest-xdist each worker process starts
its own cluster and servers, on free ports and in its own temporary folders."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dependencies import require
from pgcluster import Cluster, PostgresMissing, reset, running_cluster

from tests.servers import SERVER_WORKER_TOKEN, serve
from workers.agent.runner import CEILINGS_ENV
from workers.catalog.job_limit import FLOOR_BYTES, MAX_JOB_BYTES_ENV
from workers.compiler.jaxenv import apply_jax_environment

# Before any test imports jax, and inherited by every process a test starts: a machine
# without a GPU or TPU runs JAX on the CPU, with libtpu quiet and shareable.
apply_jax_environment()
# Workers the tests start skip measuring their roofline ceilings (about 2.3 s of CPU each
# time a worker starts, dozens of times in a full run). The tests that read them turn the
# setting back on: tests/workers/test_ceilings.py in-process, and the server of
# tests/browser/test_every_page.py, whose profiled run's roofline is drawn against them.
os.environ[CEILINGS_ENV] = "0"
# The job limit follows the host's memory unless set (workers.catalog.job_limit); the
# tests judge job sizes alike on every machine by setting it to the default's floor, for
# every server, worker and `boundary run` they start. The tests of the default itself
# give the memory size.
os.environ[MAX_JOB_BYTES_ENV] = str(FLOOR_BYTES)

from app.settings import Settings  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SERVERS = {"reader_server", "bench_server"}
"""The session's servers (below): a test that uses one is end-to-end."""
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
"""Tests measured over 3 s in a full run (scripts/slow_tests.py writes it): marked `slow`."""


FILE_TIMES = Path(__file__).with_name("file_times.txt")
"""Each test file's seconds in a full run (scripts/slow_tests.py writes it)."""


def measured_slow() -> set[str]:
    lines = SLOW_LIST.read_text().splitlines() if SLOW_LIST.exists() else []
    return {line for line in lines if line and not line.startswith("#")}


def measured_file_times() -> dict[str, float]:
    lines = FILE_TIMES.read_text().splitlines() if FILE_TIMES.exists() else []
    found = (line.split("\t", 1) for line in lines if line and not line.startswith("#"))
    return {file: float(seconds) for seconds, file in found}


def longest_files_first(items: list[pytest.Item]) -> None:
    """Orders the items file by file, the longest-running files first (a file not yet
    measured counts as long), each file's own tests in their order. With
    `--no-loadscope-reorder` pytest-xdist hands files out in this order (else it sorts them
    by their number of tests), so no long file is left to start last."""
    times = measured_file_times()
    unmeasured = max(times.values(), default=0.0)
    items.sort(key=lambda item: -times.get(item.nodeid.split("::", 1)[0], unmeasured))


@pytest.hookimpl(tryfirst=True)  # before -m selects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks what a test needs from the fixtures it uses, so that `./scripts/test --quick`
    leaves it out: `postgresql` for the cluster, `e2e` for a session's server; and `slow`
    for the tests tests/slow_tests.txt lists. In pytest-xdist's processes, orders the files
    longest first."""
    if hasattr(config, "workerinput"):  # a pytest-xdist process: its scheduler takes this order
        longest_files_first(items)
    slow = measured_slow()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
        names = set(getattr(item, "fixturenames", ()))
        if "pg_cluster" in names:
            item.add_marker(pytest.mark.postgresql)
        if names & SERVERS:
            item.add_marker(pytest.mark.e2e)


# --- the store's databases ------------------------------------------------------------------

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One throwaway PostgreSQL cluster for the whole session (tests/pgcluster.py); fails
    with how to install PostgreSQL when its binaries are missing, unless
    BOUNDARY_ALLOW_MISSING names postgresql."""
    try:
        with running_cluster() as cluster:
            yield cluster
    except PostgresMissing as missing:
        require("postgresql", str(missing))


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """The session cluster's database, emptied for this test."""
    reset(pg_cluster.url)
    return pg_cluster.url


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """BOUNDARY_DB for a fresh store, once per backend: a SQLite file, or an empty
    PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite3")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings isolated to this test: its own database and compilation cache."""
    return Settings(DB=tmp_path / "boundary.sqlite3", CACHE_DIR=tmp_path / "jax-cache")


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to a fresh app in-process (no sockets)."""
    from app.main import create_app

    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


# --- real servers, one of each kind per test process (tests/servers.py) --------------------


@pytest.fixture(scope="session")
def reader_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`boundary serve` with no workers: the reader needs none. A test may play a worker
    on it with SERVER_WORKER_TOKEN."""
    env = {"BOUNDARY_WORKER_TOKEN": SERVER_WORKER_TOKEN}
    yield from serve(tmp_path_factory.mktemp("reader"), workers=0, env=env)


@pytest.fixture(scope="session")
def bench_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server as `boundary serve` starts by default: with one local CPU worker, which
    also compiles for targets without the hardware (its worker token set, not generated),
    and the MCP endpoint at /mcp on. The tests that share it each read only the runs and
    artifacts they made."""
    env = {"BOUNDARY_WORKER_TOKEN": SERVER_WORKER_TOKEN, "BOUNDARY_MCP": "1"}
    yield from serve(tmp_path_factory.mktemp("bench"), workers=1, env=env)


# --- the bench: jobs, workers, dispatch (tests/app/test_api_*, test_worker_api, ...) ---------

BENCH_WORKER_TOKEN = "test-worker-token"


@pytest.fixture
def bench_db(tmp_path: Path) -> str:
    """The database of `bench_settings`: a SQLite file. A test module that overrides it
    with `db` runs each of its tests on both backends."""
    return str(tmp_path / "bench.sqlite3")


@pytest.fixture
def bench_settings(tmp_path: Path, bench_db: str) -> Settings:
    """Settings for dispatch tests: a worker token, short poll, quick reaper."""
    return Settings(
        DB=bench_db,
        CACHE_DIR=tmp_path / "jax-cache",
        WORKER_TOKEN=BENCH_WORKER_TOKEN,
        POLL_S=2.0,
        REAP_INTERVAL_S=0.05,
    )


@pytest.fixture
def bench_app(bench_settings: Settings) -> Any:
    """A fresh app built from `bench_settings` (its lifespan, hence the reaper, not run)."""
    from tests.app.built import build_app

    return build_app(bench_settings)


@pytest.fixture
async def bench_client(bench_app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of `bench_app`."""
    transport = httpx.ASGITransport(app=bench_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@pytest.fixture
def bench_dispatcher(bench_app: Any) -> Any:
    """The `app.dispatch.Dispatcher` inside `bench_app`."""
    from tests.app.built import state_of

    return state_of(bench_app).dispatcher


# --- the tests' own model, exported once per session (tests/workers/own_exports.py) ----------


@pytest.fixture(scope="session")
def own_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The three programs of tests/workers/own_model.py, exported with `boundary export-fn
    --example` (input rules, a sampled reference): name → own_exports.Exported. Exported
    once a run: pytest-xdist's worker processes share them (their temporary folders'
    parent is the run's own)."""
    from tests.workers.own_exports import exported_once

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return exported_once(shared / "own-model")
