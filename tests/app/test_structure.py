"""The code's structure, for the server (app/) and the workers (workers/): no import
cycles between modules, modules small enough to read in one sitting, functions a screen
long, short top levels, the server free of jax and of the worker's insides, private names
kept private; and a failed deferred build that stops `boundary serve` with a non-zero
status instead of answering every request with an error.

How imports are counted (`import_graph`), so that the test agrees with any reasonable
reading of the code:

- every import statement counts: at the top, inside functions, under
  `if TYPE_CHECKING:`, relative ones (resolved against the importing module);
- `import a.b.c` and `from a.b.c import X` depend on `a.b.c`, and on the packages above
  it (`a`, `a.b`), whose `__init__` runs first; `from pkg import X` depends on
  `pkg/__init__.py`, and on `pkg/X.py` too when X is a module;
- a package's `__init__` that imports its own modules depends on each of them;
- a module importing one of its own ancestor packages does not count (that package is
  already being imported when the module runs).
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "workers")
MAX_LINES = 400
MAX_FUNCTION_LINES = 80
"""A function's lines from its `def` to the end of its body, decorators not counted."""
MAX_TOP_LEVEL_MODULES = 10
SHARED = ("workers.protocol", "workers.catalog")
"""All of workers/ that the server may import: jax-free, the wire and the catalog."""
COMMANDS = ("workers.cli",)
"""The worker's commands, which `app.cli` (the `boundary` command) alone hands over to."""


@dataclass(frozen=True)
class Import:
    """One imported module as a statement names it, resolved to an absolute name."""

    module: str
    names: tuple[str, ...]
    """For `from module import a, b`: ("a", "b"); empty for `import module`."""
    line: int
    top_level: bool
    """At module level and not under `if TYPE_CHECKING:`: it runs when the module loads."""


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _loaded(tree: ast.Module) -> set[int]:
    """The ids of the import statements that run when the module loads: not inside a
    function and not under `if TYPE_CHECKING:`."""
    found: set[int] = set()

    def walk(body: Sequence[ast.AST]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.add(id(node))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            elif isinstance(node, ast.If) and _is_type_checking(node):
                walk(node.orelse)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    walk(getattr(node, field, []))

    walk(tree.body)
    return found


@functools.cache
def _parsed(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def parsed(path: Path) -> ast.Module:
    """The file's tree, parsed once for each version of the file: the tests here walk
    every module several times. (Nothing here changes a tree.)"""
    stat = path.stat()
    return _parsed(path, stat.st_mtime_ns, stat.st_size)


def imports(root: Path, path: Path) -> list[Import]:
    """Every import in the file at `path`, relative ones resolved."""
    name = module_name(root, path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = parsed(path)
    loaded = _loaded(tree)
    found: list[Import] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        top = id(node) in loaded
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, (), node.lineno, top) for a in node.names)
            continue
        if node.level:
            base = package[: len(package) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        found.append(Import(module, tuple(a.name for a in node.names), node.lineno, top))
    return found


def modules_of(root: Path, packages: Sequence[str]) -> dict[str, Path]:
    return {module_name(root, p): p for top in packages for p in sorted((root / top).rglob("*.py"))}


def import_graph(root: Path, packages: Sequence[str]) -> dict[str, dict[str, int]]:
    """Module → {module it depends on: the line of the first import that says so}, over
    the modules under `packages` (see the module docstring for how imports count)."""
    modules = modules_of(root, packages)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        parts = name.split(".")
        own_ancestors = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        edges: dict[str, int] = {}
        for imp in imports(root, path):
            for target in [imp.module, *(f"{imp.module}.{n}" for n in imp.names)]:
                pieces = target.split(".")
                for i in range(1, len(pieces) + 1):
                    candidate = ".".join(pieces[:i])
                    if candidate in modules and candidate not in own_ancestors:
                        edges.setdefault(candidate, imp.line)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (a path that returns to its start) through each strongly connected
    group of modules, found with Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    start = min(group)
    path = [start]
    seen = {start}
    while True:
        nxt = min(n for n in graph[path[-1]] if n in group)
        if nxt in seen:
            return [*path[path.index(nxt) :], nxt]
        path.append(nxt)
        seen.add(nxt)


def _described(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join([*steps, cycle[-1]])


def _lines(path: Path) -> int:
    """Lines as `wc -l` counts them: newline characters."""
    return path.read_bytes().count(b"\n")


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")


# --- the rules: each returns what breaks it, so it can be tried on a planted offence ------


def oversized(root: Path, packages: Sequence[str]) -> dict[str, int]:
    """Modules over MAX_LINES lines, with their line counts."""
    found = {name: _lines(path) for name, path in modules_of(root, packages).items()}
    return {name: n for name, n in found.items() if n > MAX_LINES}


def long_functions(root: Path, packages: Sequence[str]) -> list[str]:
    """Functions and methods (nested ones too) over MAX_FUNCTION_LINES lines, as
    'module:line name (n lines)'."""
    found = []
    for name, path in modules_of(root, packages).items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                # lineno is the `def` line: decorators come before it.
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def crowded(root: Path, top: str) -> list[str]:
    """The modules at the top of `top` (its `__init__.py` aside), when there are too many."""
    found = sorted(p.name for p in (root / top).glob("*.py") if p.name != "__init__.py")
    return found if len(found) > MAX_TOP_LEVEL_MODULES else []


def _under(module: str, prefixes: Sequence[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _server_imports(root: Path) -> Iterator[tuple[str, Import]]:
    for name, path in modules_of(root, ("app",)).items():
        for imp in imports(root, path):
            yield name, imp


def heavy_imports(root: Path) -> list[str]:
    """Server imports of jax, and of numpy when a module loads (not inside a function)."""
    return [
        f"{name}:{imp.line} {imp.module}"
        for name, imp in _server_imports(root)
        if _under(imp.module, ("jax", "jaxlib"))
        or (_under(imp.module, ("numpy",)) and imp.top_level)
    ]


def _workers_named(imp: Import) -> list[str]:
    """The workers/ modules an import names (`from workers import x` names workers.x)."""
    if imp.module == "workers" and imp.names:
        return [f"workers.{n}" for n in imp.names]
    return [imp.module] if _under(imp.module, ("workers",)) else []


def reaches_into_workers(root: Path) -> list[str]:
    """Server imports of workers/ beyond its shared part (app.cli may hand over to the
    worker's commands)."""
    return [
        f"{name}:{imp.line} {target}"
        for name, imp in _server_imports(root)
        for target in _workers_named(imp)
        if not _under(target, (*SHARED, *COMMANDS) if name == "app.cli" else SHARED)
    ]


def command_line_imports(root: Path) -> list[str]:
    """Server imports of the worker's command line or agent, outside `app.cli`."""
    return [
        f"{name}:{imp.line} {target}"
        for name, imp in _server_imports(root)
        for target in _workers_named(imp)
        if name != "app.cli" and _under(target, ("workers.cli", "workers.agent"))
    ]


def private_imports(root: Path, packages: Sequence[str]) -> list[str]:
    """Imports of another module's private names (or of a private module)."""
    offenders = []
    for name, path in modules_of(root, packages).items():
        for imp in imports(root, path):
            if not _under(imp.module, packages):
                continue
            private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            private += [p for p in imp.module.split(".") if p.startswith("_")]
            if private:
                offenders.append(f"{name}:{imp.line} {imp.module} {private}")
    return offenders


# --- the rules, on this repository -------------------------------------------------------


def test_no_module_imports_another_that_imports_it_back() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert [_described(graph, c) for c in cycles(graph)] == []


def test_every_module_stays_under_the_line_limit() -> None:
    assert oversized(ROOT, PACKAGES) == {}


def test_every_function_is_a_screen_long() -> None:
    # A longer flow becomes named steps (STYLE.md, rule 9).
    assert long_functions(ROOT, PACKAGES) == []


def _defines_routes(path: Path) -> bool:
    """Whether a module makes an APIRouter of its own (a module of routes)."""
    tree = parsed(path)
    return any(
        isinstance(node, ast.Call) and getattr(node.func, "id", None) == "APIRouter"
        for node in ast.walk(tree)
    )


def routes_importing_routes(root: Path) -> list[str]:
    """Each `app.routes` module that imports another module of routes: what routes share
    lives in a helper module (`common`, `artifact_common`, …) or the layer below."""
    routes = {
        name: path
        for name, path in modules_of(root, ("app",)).items()
        if name.startswith("app.routes.")
    }
    with_routes = {name for name, path in routes.items() if _defines_routes(path)}
    return [
        f"{name}:{imp.line} imports {imp.module}"
        for name, path in sorted(routes.items())
        for imp in imports(root, path)
        if imp.module in with_routes and imp.module != name
    ]


def test_routes_do_not_import_each_other() -> None:
    assert routes_importing_routes(ROOT) == []


@pytest.mark.parametrize("top", PACKAGES)
def test_the_top_level_holds_few_modules(top: str) -> None:
    assert crowded(ROOT, top) == []


def test_the_server_never_imports_jax_and_numpy_only_when_a_function_runs() -> None:
    assert heavy_imports(ROOT) == []


def test_the_server_imports_only_the_shared_part_of_the_workers() -> None:
    assert reaches_into_workers(ROOT) == []


def test_the_server_never_imports_the_workers_command_line() -> None:
    # app.cli is the `boundary` command itself, which hands `run` and `worker` over.
    assert command_line_imports(ROOT) == []


def test_modules_do_not_import_each_others_private_names() -> None:
    assert private_imports(ROOT, PACKAGES) == []


def test_each_rule_finds_an_offence_planted_in_a_small_tree(tmp_path: Path) -> None:
    files = {
        "app/__init__.py": "",
        "app/cli.py": "def run():\n    from workers.cli.run import run_command\n",
        "app/heavy.py": "import jax\nimport numpy as np\n",
        "app/lazy.py": "def header():\n    import numpy as np\n    return np\n",
        "app/reach.py": "from workers.run.engine import run_job\nfrom workers import agent\n",
        "app/private.py": "from workers.protocol import _hidden\n",
        "app/long.py": "x = 1\n" * (MAX_LINES + 1),
        **{f"app/m{i}.py": "" for i in range(MAX_TOP_LEVEL_MODULES)},
        "workers/__init__.py": "",
        "workers/protocol/__init__.py": "_hidden = 1\n",
        "workers/run/__init__.py": "",
        "workers/run/engine.py": "def run_job(): ...\n",
        "workers/agent/__init__.py": "",
        "workers/cli/__init__.py": "",
        "workers/cli/run.py": "def run_command(): ...\n",
        "workers/run/steps.py": (
            "import functools\n@functools.cache\ndef fits():\n"  # decorated: 80 lines from line 3
            + "    x = 1\n" * (MAX_FUNCTION_LINES - 1)
            + "async def too_long():\n"  # line 83
            + "    x = 1\n" * MAX_FUNCTION_LINES
            + "class Steps:\n    def method(self):\n"  # lines 164 and 165
            + "        x = 1\n" * MAX_FUNCTION_LINES
        ),
    }
    _write(tmp_path, files)
    assert oversized(tmp_path, PACKAGES) == {"app.long": MAX_LINES + 1}
    assert long_functions(tmp_path, PACKAGES) == [
        "workers.run.steps:83 too_long (81 lines)",
        "workers.run.steps:165 method (81 lines)",
    ]
    assert "long.py" in crowded(tmp_path, "app") and crowded(tmp_path, "workers") == []
    assert heavy_imports(tmp_path) == ["app.heavy:1 jax", "app.heavy:2 numpy"]
    assert reaches_into_workers(tmp_path) == [
        "app.reach:1 workers.run.engine",
        "app.reach:2 workers.agent",
    ]
    assert command_line_imports(tmp_path) == ["app.reach:2 workers.agent"]
    assert private_imports(tmp_path, PACKAGES) == ["app.private:1 workers.protocol ['_hidden']"]


# --- the graph builder, shown able to fail -----------------------------------------------


TC = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n"

GRAPHS = {
    "a relative import cycle": (
        {
            "sub/__init__.py": "",
            "sub/a.py": "from .b import thing\n",
            "sub/b.py": "from ..sub import a\nthing = 1\n",
        },
        {"pkg.sub.a": {"pkg.sub.b": 1}, "pkg.sub.b": {"pkg.sub.a": 1}},
        [["pkg.sub.a", "pkg.sub.b", "pkg.sub.a"]],
    ),
    "a cycle through TYPE_CHECKING": (
        {"a.py": "from pkg.b import B\n", "b.py": TC + "class B: ...\n"},
        {"pkg.a": {"pkg.b": 1}, "pkg.b": {"pkg.a": 3}},
        [["pkg.a", "pkg.b", "pkg.a"]],
    ),
    "a cycle through an import inside a function": (
        {"a.py": "import pkg.b\n", "b.py": "def later():\n    from pkg import a\n    return a\n"},
        {"pkg.a": {"pkg.b": 1}, "pkg.b": {"pkg.a": 2}},
        [["pkg.a", "pkg.b", "pkg.a"]],
    ),
    "from a package import a module": (
        {
            "tools/__init__.py": "",
            "tools/knife.py": "import pkg.user\n",
            "user.py": "from pkg.tools import knife\n",
        },
        {"pkg.user": {"pkg.tools": 1, "pkg.tools.knife": 1}, "pkg.tools.knife": {"pkg.user": 1}},
        [["pkg.tools.knife", "pkg.user", "pkg.tools.knife"]],
    ),
    "an __init__ that imports its modules": (
        {
            "parts/__init__.py": "from pkg.parts.one import ONE\n",
            "parts/one.py": "from pkg.helper import help_me\nONE = 1\n",
            "helper.py": "from pkg.parts import ONE\ndef help_me(): ...\n",
        },
        {"pkg.parts": {"pkg.parts.one": 1}, "pkg.helper": {"pkg.parts": 1}},
        [["pkg.helper", "pkg.parts", "pkg.parts.one", "pkg.helper"]],
    ),
    "a module importing its own package (no cycle)": (
        {
            "__init__.py": "from pkg.a import A\n",
            "a.py": "import pkg\nfrom . import b\nclass A: ...\n",
        },
        {"pkg": {"pkg.a": 1}, "pkg.a": {"pkg.b": 2}},
        [],
    ),
}


@pytest.mark.parametrize(("files", "edges", "expected"), GRAPHS.values(), ids=list(GRAPHS))
def test_the_graph_builder_on_a_small_package(
    tmp_path: Path,
    files: dict[str, str],
    edges: dict[str, dict[str, int]],
    expected: list[list[str]],
) -> None:
    _write(tmp_path / "pkg", {"__init__.py": "", "b.py": "", **files})
    graph = import_graph(tmp_path, ("pkg",))
    assert {name: graph[name] for name in edges} == edges
    assert cycles(graph) == expected


def test_lines_are_counted_as_wc_does(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(b"a = 1\nb = 2\nc = 3")  # no newline at the end: wc -l says 2
    assert _lines(path) == 2
    done = subprocess.run(["wc", "-l", str(path)], capture_output=True, text=True, check=True)
    assert int(done.stdout.split()[0]) == _lines(path)


# --- start-up ------------------------------------------------------------------------------


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
