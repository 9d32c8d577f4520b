"""The pass pipeline as the run page shows it: steps grouped by pipeline, each changed
step's diff, and where each fusion, library call, collective or copy of the final HLO
first appeared.

The worker sends `measure.pipeline`'s capture inside the run; the server keeps its texts
as a stored artifact apart from the run's JSON (which keeps the step list only).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

from app.ir.diff import normalize
from workers.protocol import PipelineCapture, PipelineStep, RunResult
from workers.protocol.hlo import instruction_heads

PIPELINE_ARTIFACT = "pipeline"
"""The stored artifact's name (not an IR: the API's artifact routes do not list it)."""
KERNEL_PIPELINES_ARTIFACT = "kernel_pipelines"
"""The stored artifact holding each Pallas kernel's own passes (JSON: name → capture)."""
STEP_ARTIFACT: dict[str, str] = {
    "mosaic": "mosaic",
    "llo": "bundles",
    "triton": "triton",
    "mosaic_gpu": "mosaic_gpu",
}
"""How a kernel pipeline's step reads, by its pipeline: Mosaic's and Triton's and Mosaic
GPU's MLIR (with `loc`s into the kernel body), libtpu's LLO as the bundles read."""
MAX_DIFF_LINES = 3000
"""Diff lines shown for one step."""
MAX_ORIGINS = 300
"""Final-HLO instructions traced back at most."""

_TRACED_OPS = re.compile(
    r"^(fusion|custom-call|copy|copy-start|all-reduce|all-gather|reduce-scatter|all-to-all|"
    r"collective-permute|collective-broadcast|ragged-all-to-all)(-start)?$"
)
_ASYNC = re.compile(r"-(start|done)(?=(\.\d+)?$)")


def split_pipeline(run: RunResult, max_bytes: int) -> tuple[str | None, RunResult]:
    """The capture as stored text (None when over `max_bytes`), and the run without its texts."""
    capture = run.pipeline
    if capture is None:
        return None, run
    text = capture.model_dump_json()
    light = capture.model_copy(update={"snapshots": [], "final": None, "files": {}})
    stored: str | None = text
    if len(text.encode()) > max_bytes:
        stored = None
        light.cut = f"the server keeps at most {max_bytes:,} bytes of pipeline (PIPELINE_MAX_BYTES)"
    return stored, run.model_copy(update={"pipeline": light})


PASS_PIPELINE = "pass pipeline"
GPU_REPORTS = "fusion decisions and launch order"


def pipeline_title(capture: PipelineCapture | None) -> str:
    """What a run's `/pipeline` page holds, in the words every link to it uses: XLA's passes
    when it was asked for them, else a GPU compile's two reports."""
    return PASS_PIPELINE if capture is not None and capture.steps else GPU_REPORTS


def load_pipeline(text: str) -> PipelineCapture:
    """The stored capture."""
    return PipelineCapture.model_validate_json(text)


def split_kernel_pipelines(run: RunResult, max_bytes: int) -> tuple[str | None, RunResult]:
    """Each Pallas kernel's passes as one stored text (None when there are none, or past
    `max_bytes`), and the run keeping only their step lists."""
    if not run.kernel_pipelines:
        return None, run
    stored: str | None = json.dumps(
        {name: capture.model_dump(mode="json") for name, capture in run.kernel_pipelines.items()}
    )
    light = {
        name: capture.model_copy(update={"snapshots": [], "final": None, "files": {}})
        for name, capture in run.kernel_pipelines.items()
    }
    if stored is not None and len(stored.encode()) > max_bytes:
        stored = None
        for capture in light.values():
            capture.cut = (
                f"the server keeps at most {max_bytes:,} bytes of pipeline (PIPELINE_MAX_BYTES)"
            )
    return stored, run.model_copy(update={"kernel_pipelines": light})


def load_kernel_pipelines(text: str) -> dict[str, PipelineCapture]:
    """The stored kernel pipelines, by kernel name."""
    return {
        name: PipelineCapture.model_validate(capture) for name, capture in json.loads(text).items()
    }


@dataclass
class StepRow:
    """One step as the pass list shows it."""

    order: int
    label: str
    changed: bool
    pass_name: str
    unchanged_next: str | None
    diff_url: str | None


@dataclass
class Group:
    """Consecutive steps of one pipeline."""

    pipeline: str
    rows: list[StepRow] = field(default_factory=list)


@dataclass
class Origin:
    """A final-HLO instruction and the step after which an instruction of its name appeared."""

    name: str
    op: str
    order: int | None
    pipeline: str | None
    pass_name: str | None
    via: str | None = None


def _label(step: PipelineStep) -> str:
    return f"start of {step.pipeline}" if step.changed == "pipeline-start" else step.changed


def responsible(steps: list[PipelineStep], index: int) -> str:
    """The pass to credit for the snapshot at `steps[index]`.

    A snapshot at the start of a nested pipeline shows what the enclosing pass did before
    starting it (the SPMD partitioner runs its own cleanup pipelines, for one): credit the
    pass of the outer pipeline that finishes next.
    """
    step = steps[index]
    if step.changed != "pipeline-start" or index == 0:
        return _label(step)
    outer = steps[index - 1].pipeline
    if outer != step.pipeline:
        for later in steps[index + 1 :]:
            if later.pipeline == outer and later.changed != "pipeline-start":
                return f"{later.changed} (seen as its nested pipeline {step.pipeline} starts)"
    return _label(step)


def pass_groups(capture: PipelineCapture, base: str) -> list[Group]:
    """The steps in order, grouped by pipeline; changed steps link to their diff."""
    groups: list[Group] = []
    steps = capture.steps
    previous = 0
    for i, step in enumerate(steps):
        changed = step.snapshot != previous
        previous = step.snapshot
        following = steps[i + 1] if i + 1 < len(steps) else None
        quiet = step.next
        if quiet in (None, "pipeline-end") or (following and following.changed == quiet):
            quiet = None  # the next pass is the one that made the following snapshot
        row = StepRow(
            order=step.order,
            label=_label(step),
            changed=changed,
            pass_name=step.changed,
            unchanged_next=quiet,
            diff_url=f"{base}?step={step.order}#diff" if changed else None,
        )
        if not groups or groups[-1].pipeline != step.pipeline:
            groups.append(Group(step.pipeline))
        groups[-1].rows.append(row)
    return groups


def step_diff(capture: PipelineCapture, order: int) -> Markup | None:
    """The unified diff the step numbered `order` made (source notes dropped), as markup."""
    found = next((i for i, s in enumerate(capture.steps) if s.order == order), None)
    if found is None:
        return None
    step = capture.steps[found]
    before_index = capture.steps[found - 1].snapshot if found > 0 else 0
    if step.snapshot >= len(capture.snapshots) or before_index >= len(capture.snapshots):
        return None
    before = normalize(capture.snapshots[before_index]).splitlines()
    after = normalize(capture.snapshots[step.snapshot]).splitlines()
    rows: list[str] = []
    for line in difflib.unified_diff(before, after, "before", "after", n=2, lineterm=""):
        if len(rows) >= MAX_DIFF_LINES:
            rows.append('<div class="d-cut">… the diff goes on (cut for the page)</div>')
            break
        kind = {"+": "d-add", "-": "d-del", "@": "d-hunk"}.get(line[:1], "d-same")
        if line.startswith(("+++", "---")):
            kind = "d-file"
        rows.append(f'<div class="{kind}">{escape(line)}</div>')
    if not rows:
        return Markup(
            '<p class="meta">The module text is the same once source notes are dropped.</p>'
        )
    return Markup("".join(rows))


def origins(capture: PipelineCapture, final_hlo: str) -> list[Origin]:
    """Each fusion, custom call, collective and copy in `final_hlo`, with the step after
    which it first appeared in the dumped module: under its own name, its synchronous
    name (an async -start/-done), or a name XLA gave it before renaming it (see
    `_Renames`)."""
    found: list[Origin] = []
    first_seen: dict[int, int] = {}  # snapshot index → first step index holding it
    for i, step in enumerate(capture.steps):
        first_seen.setdefault(step.snapshot, i)
    ordered = sorted(first_seen.items(), key=lambda item: item[1])
    renames = _Renames(capture, [snapshot for snapshot, _ in ordered])
    for name, _, op in instruction_heads(final_hlo):
        if not _TRACED_OPS.match(op) or op.endswith("-done"):
            continue
        origin = Origin(name, op, None, None, None)
        candidates = [name]
        synchronous = _ASYNC.sub("", name)
        if synchronous != name:
            candidates.append(synchronous)
        for candidate in candidates:
            position = renames.first(candidate, len(ordered))
            if position is None:
                continue
            traced = candidate
            for _ in range(MAX_RENAMES):
                before = renames.renamed_from(traced, position) if position > 0 else None
                if before is None:
                    break
                traced = before
                position = renames.first(traced, position) or 0
            snapshot, step_index = ordered[position]
            step = capture.steps[step_index]
            origin.order, origin.pipeline = step.order, step.pipeline
            origin.pass_name = (
                responsible(capture.steps, step_index) if snapshot else "present from the start"
            )
            if traced != name:
                origin.via = traced
            break
        found.append(origin)
        if len(found) >= MAX_ORIGINS:
            break
    return found


MAX_RENAMES = 8
"""Renames followed back from one final-HLO name at most."""


class _Renames:
    """Names across the snapshots, in the order XLA dumped them, so a final-HLO name can
    be followed back through the renames XLA makes (XLA:GPU's `rename_fusions` names every
    fusion after its hero at the end; merging a producer can rename a consumer).

    A name that first appears in one snapshot was renamed from one that vanished there if
    the two hold the same place: the snapshot before and this one are aligned on each
    instruction's shape and op (names left out), and within a stretch that matches, the
    instruction at the same offset is the one it was."""

    def __init__(self, capture: PipelineCapture, snapshots: list[int]) -> None:
        self._capture = capture
        self._snapshots = snapshots
        self._parsed: dict[int, list[tuple[str, str, str]]] = {}

    def _instructions(self, position: int) -> list[tuple[str, str, str]]:
        snapshot = self._snapshots[position]
        if snapshot not in self._parsed:
            self._parsed[snapshot] = instruction_heads(self._capture.snapshots[snapshot])
        return self._parsed[snapshot]

    def first(self, name: str, before: int) -> int | None:
        """The first position (before `before`) whose snapshot holds `name`."""
        needle = f"%{name} = "
        for position in range(before):
            if needle in self._capture.snapshots[self._snapshots[position]]:
                return position
        return None

    def renamed_from(self, name: str, position: int) -> str | None:
        """The name `name` had in the snapshot before `position`, if it was renamed there."""
        old, new = self._instructions(position - 1), self._instructions(position)
        old_names = {row[0] for row in old}
        matcher = difflib.SequenceMatcher(
            None, [row[1:] for row in old], [row[1:] for row in new], autojunk=False
        )
        for i, j, size in matcher.get_matching_blocks():
            for k in range(size):
                if new[j + k][0] == name:
                    was = old[i + k][0]
                    new_names = {row[0] for row in new}
                    return was if was != name and was in old_names - new_names else None
        return None


@dataclass
class AlignedRow:
    """Two pipelines side by side: a step both ran (two sides) or one side only."""

    a: StepRow | None
    b: StepRow | None


def align(a: PipelineCapture, b: PipelineCapture, base_a: str, base_b: str) -> list[AlignedRow]:
    """The two step lists aligned by pipeline and pass name; a step only one side ran stands
    alone. Each changed step links to its own side's diff."""
    rows_a = [r for g in pass_groups(a, base_a) for r in g.rows]
    rows_b = [r for g in pass_groups(b, base_b) for r in g.rows]
    pipes_a = [s.pipeline for s in a.steps]
    pipes_b = [s.pipeline for s in b.steps]
    keys_a = [f"{p}/{r.pass_name}" for p, r in zip(pipes_a, rows_a, strict=True)]
    keys_b = [f"{p}/{r.pass_name}" for p, r in zip(pipes_b, rows_b, strict=True)]
    out: list[AlignedRow] = []
    matcher = difflib.SequenceMatcher(a=keys_a, b=keys_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(
                AlignedRow(rows_a[i], rows_b[j])
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            )
            continue
        out.extend(AlignedRow(rows_a[i], None) for i in range(i1, i2))
        out.extend(AlignedRow(None, rows_b[j]) for j in range(j1, j2))
    return out
