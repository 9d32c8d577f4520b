"""Whether this Python already has what `pip install -e '.[EXTRA]'` installs for this
checkout, so that ./scripts/test installs nothing when nothing is missing.

    .venv/bin/python scripts/venv_has.py dev

Exit 0 when boundary is installed in editable mode from this folder and every requirement
in pyproject.toml's dependencies and the named extras (the extras they name followed, ours
and other packages') is met by an installed distribution; otherwise exit 1, naming the
first requirement that is not. It reads pyproject.toml itself, not the metadata of the last
install, so a requirement added since is seen as missing.
"""

from __future__ import annotations

import json
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def wanted(project: dict[str, Any], extras: list[str]) -> list[Requirement]:
    """The project's dependencies and those of `extras`, its own extras followed."""
    own = canonicalize_name(project["name"])
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    found = [Requirement(line) for line in project.get("dependencies", [])]
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in optional[extra]:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) == own:
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def unmet(requirement: Requirement, extra: str = "", seen: set[str] | None = None) -> str | None:
    """Why `requirement` (a line of a distribution's `extra`) is not met here; None when it
    is, or when its marker leaves it out on this platform."""
    seen = set() if seen is None else seen
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
        return None
    try:
        dist = metadata.distribution(requirement.name)
    except metadata.PackageNotFoundError:
        return f"{requirement} is not installed"
    if not requirement.specifier.contains(dist.version, prereleases=True):
        return f"{requirement.name} {dist.version} does not meet {requirement}"
    for wanted_extra in sorted(requirement.extras):
        key = f"{canonicalize_name(requirement.name)}[{wanted_extra}]"
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            inner = Requirement(line)
            if inner.marker is None or "extra" not in str(inner.marker):
                continue  # the distribution's own dependencies came with it
            why = unmet(inner, wanted_extra, seen)
            if why is not None:
                return f"{why} (for {key})"
    return None


def installed_from_here(name: str) -> str | None:
    """Why `name` is not installed in editable mode from this folder; None when it is."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return f"{name} is not installed"
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    if origin.get("url") != ROOT.as_uri() or not origin.get("dir_info", {}).get("editable"):
        return f"{name} is not installed in editable mode from {ROOT}"
    return None


def main(extras: list[str]) -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    why = installed_from_here(project["name"])
    for requirement in wanted(project, extras):
        why = why or unmet(requirement)
    if why is not None:
        print(f"to install: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
