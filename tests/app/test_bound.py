"""Apps built in one process share one API app (its routes built once) and still each
serve their own state: their own store, settings and body caps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import shared_api
from app.settings import Settings
from tests.app.built import build_app

pytestmark = pytest.mark.anyio
TOKEN = "a-submission-token-of-ours"


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_two_apps_share_the_routes_and_keep_their_own_state(tmp_path: Path) -> None:
    guarded = build_app(
        Settings(DB=str(tmp_path / "a.sqlite3"), SUBMIT_TOKEN=TOKEN, MAX_BODY_BYTES=4096)
    )
    open_app = build_app(Settings(DB=str(tmp_path / "b.sqlite3")))
    job = {"workload": "matmul", "path": "jax-cpu", "stages": ["compile"]}
    async with _client(guarded) as a, _client(open_app) as b:
        refused = await a.post("/api/v1/jobs", json=job)
        assert refused.status_code == 401, refused.text  # this app's token
        made = await b.post("/api/v1/jobs", json=job)
        assert made.status_code == 202, made.text  # that one has none
        job_id = made.json()["id"]
        assert (await b.get(f"/api/v1/jobs/{job_id}")).status_code == 200
        assert (await a.get(f"/api/v1/jobs/{job_id}")).status_code == 404  # its own store
        assert [j["id"] for j in (await b.get("/api/v1/jobs")).json()["data"]] == [job_id]
        assert (await a.get("/api/v1/jobs")).json()["data"] == []
        big = {**job, "label": "x" * 8192}
        over = await a.post("/api/v1/jobs", json=big, headers={"authorization": f"Bearer {TOKEN}"})
        assert over.status_code == 413, over.text  # its own cap, 4 KiB
        assert (await b.post("/api/v1/jobs", json=big)).status_code != 413


def test_a_new_app_builds_no_routes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import app.main

    shared_api()  # this process's, built at most once
    built: list[object] = []
    real = app.main._fastapi

    def counted() -> Any:
        built.append(real())
        return built[-1]

    monkeypatch.setattr(app.main, "_fastapi", counted)
    for name in ("a", "b"):
        build_app(Settings(DB=str(tmp_path / f"{name}.sqlite3")))
    assert built == []
