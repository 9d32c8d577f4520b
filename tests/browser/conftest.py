"""A real Chromium for the browser tests; the `boundary serve` helpers they use are in
tests/servers.py (re-exported here), the servers they share in tests/conftest.py."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import free_port, serve, upload_exported, wait_for_target, wait_until_up

HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CHROMIUM = os.environ.get(
    "BOUNDARY_CHROMIUM", HEADLESS_SHELL if Path(HEADLESS_SHELL).exists() else "/usr/bin/chromium"
)
"""Debian's Chromium headless shell where it is installed (./scripts/test installs it), the
build of the same Chromium that Playwright itself runs headless, with the same Blink and V8
as the full browser and none of its windowing: 13 % less CPU over the every-page module,
servers and pytest included (docs/testing.md). BOUNDARY_CHROMIUM names another binary;
without the shell, the full browser serves."""
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
__all__ = ["free_port", "serve", "upload_exported", "wait_for_target", "wait_until_up"]


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
