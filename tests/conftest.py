"""Fixtures shared by every test: fresh settings and an in-process app per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings


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
