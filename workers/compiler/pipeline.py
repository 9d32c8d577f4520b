"""XLA's pass pipeline for one program: compile it once more with the per-pass dump on.

`lowered.compile(compiler_options={"xla_dump_to": DIR, "xla_dump_hlo_pass_re": ".*"})`
writes the module before optimization, after every pass that changed it, and after
optimization, for that one compile and no other. The capture is a separate compile after
the timed one, so the compile time a run reports never includes the dump. Its size is
capped by BOUNDARY_PIPELINE_MAX_BYTES; a capture cut short says so.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from workers.compiler.options import CompileOptions, compile_options
from workers.protocol import PipelineCapture, PipelineStep

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""Text kept per capture unless BOUNDARY_PIPELINE_MAX_BYTES says otherwise."""

_STEP = re.compile(
    r"^module_(?P<module>\d+)\.(?P<name>.+?)\.(?P<order>\d{4})\.(?P<pipeline>[^.]+)"
    r"\.after_(?P<changed>[^.]+?)(?:\.before_(?P<next>[^.]+))?\.txt$"
)
_EDGE = re.compile(
    r"^module_(?P<module>\d+)\..+?\.(?:\w+_)?(?P<edge>before|after)_optimizations\.txt$"
)
REPORTS = ("priority_fusion_dump.txt", "thunk_sequence.txt")
"""GPU compiler reports kept whole: fusion decisions and the launch sequence."""


def max_bytes_from_env() -> int:
    """BOUNDARY_PIPELINE_MAX_BYTES, or the default; a bad value names itself."""
    raw = os.environ.get("BOUNDARY_PIPELINE_MAX_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    if not raw.isdigit() or int(raw) < 1024:
        raise ValueError(f"BOUNDARY_PIPELINE_MAX_BYTES must be a whole number ≥ 1024, not {raw!r}")
    return int(raw)


def capture_pipeline(
    lowered: Any, max_bytes: int, job_options: CompileOptions | None = None
) -> PipelineCapture:
    """Compile `lowered` again, with the job's own compiler options and the per-pass dump,
    and read the dump back."""
    from workers.compiler.jaxtyped import config_update, config_value

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="boundary-pipeline-") as folder:
        options = compile_options(
            job_options or {}, {"xla_dump_to": folder, "xla_dump_hlo_pass_re": ".*"}
        )
        cached = config_value("jax_enable_compilation_cache")
        config_update("jax_enable_compilation_cache", False)  # a cache hit dumps nothing
        try:
            lowered.compile(compiler_options=options)
        finally:
            config_update("jax_enable_compilation_cache", cached)
        capture = read_dump(Path(folder), max_bytes)
    capture.capture_s = time.perf_counter() - started
    return capture


def read_reports(folder: Path, max_bytes: int) -> dict[str, str]:
    """The GPU compiler reports in a dump folder (any module), each kept whole within budget."""
    found: dict[str, str] = {}
    budget = max_bytes
    for path in sorted(folder.iterdir()):
        for report in REPORTS:
            if path.name.endswith(report) and report not in found:
                text = path.read_text(errors="replace")
                if len(text.encode()) <= budget:
                    found[report] = text
                    budget -= len(text.encode())
    return found


def read_dump(folder: Path, max_bytes: int) -> PipelineCapture:
    """The steps, distinct snapshots and GPU reports of the main module dumped in `folder`."""
    steps: dict[str, list[tuple[int, re.Match[str], Path]]] = {}
    edges: dict[tuple[str, str], Path] = {}
    reports: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if m := _STEP.match(path.name):
            steps.setdefault(m.group("module"), []).append((int(m.group("order")), m, path))
        elif m := _EDGE.match(path.name):
            edges[(m.group("module"), m.group("edge"))] = path
        else:
            for report in REPORTS:
                if path.name.endswith(report):
                    reports[report] = path
    capture = PipelineCapture()
    if not steps:
        capture.cut = "XLA wrote no per-pass dump for this compile"
        return capture
    module = max(steps, key=lambda k: len(steps[k]))  # the program, not a small helper module
    budget = max_bytes

    def keep(text: str) -> bool:
        nonlocal budget
        size = len(text.encode())
        if size > budget:
            capture.cut = f"stopped at BOUNDARY_PIPELINE_MAX_BYTES ({max_bytes:,} bytes)"
            return False
        budget -= size
        capture.bytes += size
        return True

    before = edges.get((module, "before"))
    if before is not None and keep(text := before.read_text(errors="replace")):
        capture.snapshots.append(text)
    for order, m, path in sorted(steps[module], key=lambda item: item[0]):
        text = path.read_text(errors="replace")
        if not capture.snapshots or text != capture.snapshots[-1]:
            if not keep(text):
                break
            capture.snapshots.append(text)
        capture.steps.append(
            PipelineStep(
                order=order,
                pipeline=m.group("pipeline"),
                changed=m.group("changed"),
                next=m.group("next"),
                snapshot=len(capture.snapshots) - 1,
            )
        )
    after = edges.get((module, "after"))
    if (
        after is not None
        and capture.cut is None
        and keep(text := after.read_text(errors="replace"))
    ):
        capture.final = text
    for name, path in reports.items():
        text = path.read_text(errors="replace")
        if keep(text):
            capture.files[name] = text
    return capture
