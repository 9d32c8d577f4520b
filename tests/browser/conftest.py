"""A real `boundary serve` process and a real Chromium, for the browser tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = os.environ.get("BOUNDARY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("server did not come up")


def serve(tmp: Path, workers: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """`boundary serve` on a free loopback port with `workers` local workers, then stopped.
    `env` adds settings (BOUNDARY_*) to the server's environment."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", str(workers)],
        env={
            **os.environ,
            "BOUNDARY_DB": str(tmp / "db.sqlite3"),
            "BOUNDARY_CACHE_DIR": str(tmp / "jax-cache"),
            **(env or {}),
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_for_target(url: str, target: str) -> None:
    """Wait (up to 2 minutes) until a connected worker offers `target`: a local worker
    detects what it compiles for only after it started."""
    for _ in range(480):
        workers = httpx.get(url + "/api/v1/workers", timeout=5).json()["data"]
        if any(target in (w.get("targets") or []) for w in workers):
            return
        time.sleep(0.25)
    pytest.fail(f"the local worker never offered target {target}")


def upload_exported(url: str, data: bytes) -> str:
    """Upload a `boundary export-fn` artifact as the CLI does; its sha256."""
    r = httpx.post(
        f"{url}/api/v1/artifacts",
        params={"kind": "exported"},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    sha: str = r.json()["sha256"]
    return sha


@pytest.fixture(scope="session")
def reader_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with no workers: the reader needs none."""
    yield from serve(tmp_path_factory.mktemp("reader"), workers=0)


@pytest.fixture(scope="session")
def bench_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server as `boundary serve` starts by default: with one local CPU worker."""
    yield from serve(tmp_path_factory.mktemp("bench"), workers=1)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Chromium for one test module. Module scope, not session: Playwright's sync API keeps
    an event loop running, which anyio's pytest runner must not find in later modules."""
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}; the test command installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context and page for one test."""
    context = browser.new_context()
    p = context.new_page()
    yield p
    context.close()


@pytest.fixture(params=[True, False], ids=["js", "no-js"])
def any_page(request: pytest.FixtureRequest, browser: Any) -> Iterator[Any]:
    """A page with JavaScript on, then off: every flow works both ways (`page.js` says
    which)."""
    context = browser.new_context(java_script_enabled=request.param)
    page = context.new_page()
    page.js = request.param
    yield page
    context.close()
