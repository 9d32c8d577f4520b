"""Small holes: huge JSON integers, short tokens, token comparison in forms, our own 422
for query parameters, HEAD on a run's live stream."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from app.settings import Settings
from tests.app.bench_fakes import AUTH, MATMUL, capabilities

pytestmark = pytest.mark.anyio

APP = Path(__file__).resolve().parents[2] / "app"
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/api/v1/jobs", '{"workload": "matmul", "path": "jax-cpu", "params": {"m": %s}}', {}),
        ("/api/v1/matrices", '{"workload": "matmul", "paths": ["jax-cpu"], "x": %s}', {}),
        ("/api/v1/worker/register", '{"capabilities": {"device_count": %s}}', AUTH),
    ],
)
async def test_an_integer_of_thousands_of_digits_is_a_422(
    bench_client: httpx.AsyncClient, path: str, body: str, headers: dict[str, str]
) -> None:
    # Before: a 500 (Python refuses to convert more than 4,300 digits).
    r = await bench_client.post(
        path,
        content=body % HUGE,
        headers={**headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    (problem,) = r.json()["detail"]
    assert problem["field"] == "body" and "5,000 digits" in problem["message"]
    assert HUGE not in r.text


async def test_a_huge_integer_in_a_form_is_named_not_a_500(
    bench_client: httpx.AsyncClient,
) -> None:
    form = f"workload=matmul&paths=jax-cpu&axis.name=m&axis.values={HUGE}&samples=5"
    r = await bench_client.post(
        "/matrices", content=form, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 422


@pytest.mark.parametrize("token", ["", " ", "short-token"])
def test_an_empty_or_short_token_is_refused(token: str, tmp_path: Path) -> None:
    for name in ("SUBMIT_TOKEN", "WORKER_TOKEN"):
        with pytest.raises(ValidationError, match="at least 16 characters"):
            Settings(DB=tmp_path / "x.sqlite3", **{name: token})


def test_serve_refuses_an_empty_submission_token_at_start_up(tmp_path: Path) -> None:
    env = {**os.environ, "BOUNDARY_DB": str(tmp_path / "db.sqlite3"), "BOUNDARY_SUBMIT_TOKEN": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", "1", "--workers", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "BOUNDARY_SUBMIT_TOKEN" in proc.stderr and "16 characters" in proc.stderr


def test_no_token_is_compared_with_equality() -> None:
    offenders = []
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops
            ):
                text = ast.unparse(node).lower()
                if "token" in text and "none" not in text:
                    offenders.append(f"{path.name}: {ast.unparse(node)}")
    assert offenders == []


async def test_query_parameter_errors_name_the_field_without_echoing_it(
    bench_client: httpx.AsyncClient,
) -> None:
    echo = "x" * 300
    r = await bench_client.get("/api/v1/jobs", params={"limit": echo})
    assert r.status_code == 422
    (problem,) = r.json()["detail"]
    assert problem["field"] == "limit"
    assert "integer" in problem["message"]
    assert echo not in r.text
    r = await bench_client.get("/api/v1/jobs", params={"limit": "0"})
    assert r.json()["detail"] == [{"field": "limit", "message": "limit must be at least 1"}]


async def test_head_on_a_runs_live_stream(bench_client: httpx.AsyncClient) -> None:
    job_id = (await bench_client.post("/api/v1/jobs", json=MATMUL)).json()["id"]
    r = await bench_client.head(f"/runs/{job_id}/live")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.content == b""
    assert (await bench_client.head("/runs/nope/live")).status_code == 404
    # GET too: the check used to run inside the stream, after its 200 had been sent.
    gone = await bench_client.get("/runs/nope/live")
    assert gone.status_code == 404 and "text/event-stream" not in gone.headers["content-type"]


async def test_registration_accepts_normal_integers(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.post(
        "/api/v1/worker/register", json={"capabilities": capabilities()}, headers=AUTH
    )
    assert r.status_code == 200
