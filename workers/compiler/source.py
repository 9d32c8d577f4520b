"""The source text of the workload function a run traced, to send with the run.

The text is the method that builds the traced function (`mesh_function` for a scale
workload, `function` otherwise): it holds the traced function and the choices closed
over. Its lines keep their file line numbers, so the `file:line` positions the IR
carries point into it. Uploaded (exported) functions have no source here: None.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Any

from workers.protocol import SourceText

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The directory holding the `workers` package: source paths are given relative to it."""


def workload_source(workload: Any, pallas: bool = False) -> SourceText | None:
    """The source of `workload`'s function-building method, or None when it has none. With
    `pallas`, the whole module of its Pallas kernels instead: the kernel body is what the
    kernel's IR (Mosaic, Triton, Mosaic GPU) points into, line by line."""
    if getattr(workload, "name", "") == "exported":
        return None
    kind = type(workload)
    method: Any = getattr(kind, "mesh_function", None) or getattr(kind, "function", None)
    if pallas and getattr(workload, "pallas_module", None) is not None:
        method = workload.pallas_module
    if method is None:
        return None
    try:
        lines, first = inspect.getsourcelines(method)
        file = inspect.getsourcefile(method)
    except (OSError, TypeError):  # built without source files (a frozen or zipped install)
        return None
    if file is None:
        return None
    path = Path(file).resolve()
    try:
        shown = path.relative_to(PACKAGE_ROOT).as_posix()
    except ValueError:
        shown = path.name
    text = "".join(lines).rstrip("\n")
    return SourceText(
        path=shown,
        function=getattr(method, "__qualname__", None) or method.__name__,
        first_line=max(1, first),  # a module's source starts at line 0
        text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
    )
