"""The server's module structure: no import cycles, routers that do not reach into each
other, `app/` free of the worker's command line, and a failed deferred build that stops
`boundary serve` with a non-zero status instead of answering every request with an error."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) imported at run time (not under `if TYPE_CHECKING:`), anywhere in
    the file, including inside functions."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in APP.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for module, names in _runtime_imports(path):
            for candidate in [module, *(f"{module}.{n}" for n in names)]:
                if candidate in modules and candidate != name:
                    edges.add(candidate)
        graph[name] = edges
    return graph


def test_app_has_no_import_cycles() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    # A package importing its own parts (app.dispatch -> app.dispatch.core) is no cycle
    # unless a part imports the package back; those show up here as well.
    assert cycles == []


def test_modules_do_not_import_each_others_private_names() -> None:
    offenders = []
    for path in APP.rglob("*.py"):
        for module, names in _runtime_imports(path):
            if module.startswith("app.") and any(n.startswith("_") for n in names):
                offenders.append(f"{_module_name(path)}: from {module} import {names}")
    assert offenders == []


def test_the_server_never_imports_the_workers_command_line() -> None:
    # app.cli is the `boundary` command itself, which hands `run` and `worker` over.
    offenders = [
        _module_name(path)
        for path in APP.rglob("*.py")
        if path.name != "cli.py" or path.parent != APP
        for module, _ in _runtime_imports(path)
        if module in ("workers.cli", "workers.cli.worker", "workers.agent.agent")
    ]
    assert offenders == []


@pytest.mark.e2e
def test_serve_exits_non_zero_when_the_api_cannot_be_built(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's directory should be")
    env = {**os.environ, "BOUNDARY_DB": str(blocker / "db.sqlite3")}
    env.pop("BOUNDARY_WORKER_TOKEN", None)
    from tests.browser.conftest import free_port

    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port()), "--workers", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "failed to start" in proc.stderr
