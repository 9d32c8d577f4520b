"""Fixtures shared by every test: fresh settings and an in-process app per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from workers.compiler.jaxenv import apply_jax_environment

# Before any test imports jax, and inherited by every process a test starts: a machine
# without a GPU or TPU runs JAX on the CPU, with libtpu quiet and shareable.
apply_jax_environment()

from app.settings import Settings  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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


# --- the bench: jobs, workers, dispatch (tests/app/test_api_*, test_worker_api, ...) ---------

BENCH_WORKER_TOKEN = "test-worker-token"


@pytest.fixture
def bench_settings(tmp_path: Path) -> Settings:
    """Settings for dispatch tests: a worker token, short poll, quick reaper."""
    return Settings(
        DB=tmp_path / "bench.sqlite3",
        CACHE_DIR=tmp_path / "jax-cache",
        WORKER_TOKEN=BENCH_WORKER_TOKEN,
        POLL_S=2.0,
        REAP_INTERVAL_S=0.05,
    )


@pytest.fixture
def bench_app(bench_settings: Settings) -> Any:
    """A fresh app built from `bench_settings` (its lifespan, hence the reaper, not run)."""
    from app.main import create_app

    return create_app(bench_settings)


@pytest.fixture
async def bench_client(bench_app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of `bench_app`."""
    transport = httpx.ASGITransport(app=bench_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@pytest.fixture
def bench_dispatcher(bench_app: Any) -> Any:
    """The `app.dispatch.Dispatcher` inside `bench_app`."""
    return bench_app.app.app.state.boundary.dispatcher


# --- the tests' own model, exported once per session (tests/workers/own_exports.py) ----------


@pytest.fixture(scope="session")
def own_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The three programs of tests/workers/own_model.py, exported with `boundary export-fn
    --example` (input rules, a sampled reference): name → own_exports.Exported."""
    from tests.workers.own_exports import PROGRAMS, export_program

    folder = tmp_path_factory.mktemp("own-model")
    return {name: export_program(name, folder) for name in PROGRAMS}
