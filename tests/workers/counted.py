"""A real tool behind a script that notes each run: how a test sees that a process did not
start a tool again."""

from __future__ import annotations

from pathlib import Path


def counted(tool: str, log: Path) -> str:
    """A script in `log`'s folder that appends a line to `log`, then runs `tool`."""
    script = log.parent / f"counted-{Path(tool).name}"
    script.write_text(f'#!/bin/sh\necho "{Path(tool).name}" >> "{log}"\nexec "{tool}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def runs(log: Path) -> list[str]:
    """The tools run so far, in order."""
    return log.read_text().split() if log.exists() else []
