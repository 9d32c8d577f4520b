"""A kernel compiler's own passes as a pipeline the page reads like XLA's.

Mosaic TPU and libtpu's LLO dumps hold the IR *after* each pass; Triton and Mosaic GPU
print MLIR's "IR Dump Before PASS" blocks. `after_steps` turns the latter into the
former (the IR before pass i+1 is the IR after pass i), and `kernel_capture` joins a
kernel's pipelines (Mosaic then LLO on TPU; Triton; Mosaic GPU) into one
`PipelineCapture`: ordered steps over distinct snapshots, each step named by its pass, so
`app.ir.pipeline` shows them with their diffs unchanged. Each capture is cut at
BOUNDARY_PIPELINE_MAX_BYTES, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

from workers.protocol import PipelineCapture, PipelineStep
from workers.xla_targets.tpu_dump import PassStep

_IR_DUMP_HEADER = re.compile(r"^// -----// IR Dump (?:Before|After) (?P<pass>[^\s:(]+)")


def split_ir_dump(text: str) -> list[PassStep]:
    """MLIR's `--mlir-print-ir-before-all` output as (pass about to run, the IR it gets)."""
    steps: list[PassStep] = []
    current: list[str] | None = None
    name = ""
    for line in text.splitlines():
        m = _IR_DUMP_HEADER.match(line)
        if m:
            if current is not None:
                steps.append(PassStep(name, "\n".join(current)))
            name, current = m.group("pass"), []
        elif current is not None:
            current.append(line)
    if current is not None:
        steps.append(PassStep(name, "\n".join(current)))
    return steps


def after_steps(before: list[PassStep]) -> list[PassStep]:
    """IR-before-each-pass steps as IR-after-each-pass steps, the first one `original`.
    The last pass's own output is not in such a dump (it is the LLVM IR that becomes PTX)."""
    if not before:
        return []
    return [PassStep("original", before[0].text)] + [
        PassStep(before[i - 1].name, before[i].text) for i in range(1, len(before))
    ]


def kernel_capture(
    stages: list[tuple[str, list[PassStep]]], max_bytes: int, capture_s: float | None = None
) -> PipelineCapture:
    """One kernel's pass lists (e.g. [("mosaic", …), ("llo", …)]) as one capture."""
    capture = PipelineCapture(capture_s=capture_s)
    order = 0
    for pipeline, steps in stages:
        for i, step in enumerate(steps):
            if not capture.snapshots or step.text != capture.snapshots[-1]:
                size = len(step.text.encode())
                if capture.bytes + size > max_bytes:
                    capture.cut = f"stopped at BOUNDARY_PIPELINE_MAX_BYTES ({max_bytes:,} bytes)"
                    return capture
                capture.bytes += size
                capture.snapshots.append(step.text)
            following = steps[i + 1].name if i + 1 < len(steps) else None
            capture.steps.append(
                PipelineStep(
                    order=order,
                    pipeline=pipeline,
                    changed=step.name,
                    next=following,
                    snapshot=len(capture.snapshots) - 1,
                )
            )
            order += 1
    return capture


def read_triton_passes(folder: Path) -> dict[str, list[PassStep]]:
    """The IR before each Triton pass, per kernel, from what `xla_dump_emitter_re` writes
    (`<module>.<kernel>.triton-to-llvm.txt`): XLA's own passes first, then Triton's
    (TTIR → TTGIR → LLVM)."""
    found: dict[str, list[PassStep]] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        with path.open(errors="replace") as handle:
            if "IR Dump" not in handle.read(4096):
                continue
        name = re.sub(r"\.triton-to-llvm\.txt$|\.txt$", "", path.name).split(".", 1)[-1]
        found[name] = split_ir_dump(path.read_text(errors="replace"))
    return found
