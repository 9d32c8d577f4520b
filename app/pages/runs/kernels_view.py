"""The run page's kernel panel: which kernel implemented the operation (XLA's, or a Pallas
kernel and its block sizes), and what the compiler made of each kernel below the HLO:
TPU schedules (bundles, MXU ops, VMEM) and GPU resources (registers, spills) from SASS,
with links to each artifact and to each Pallas kernel's own pass pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from workers.catalog.kernel_words import kernel_phrase
from workers.catalog.kernels import INTERPRET_WARNING
from workers.protocol import KernelResources, KernelSchedule, PathId, RunResult

BELOW_HLO = ("mosaic", "triton", "mosaic_gpu", "bundles", "ptx", "sass")
"""The artifacts below the optimized HLO, in the order a kernel goes through them."""


@dataclass
class KernelsView:
    """What `_run_extras_kernels.html` shows."""

    phrase: str | None
    interpret: bool
    schedules: list[KernelSchedule] = field(default_factory=list)
    resources: list[KernelResources] = field(default_factory=list)
    dump: str | None = None
    artifacts: list[str] = field(default_factory=list)
    pipelines: list[tuple[str, str]] = field(default_factory=list)
    """(kernel, URL of its pass pipeline)."""


def kernels_view(job_id: str, run: RunResult) -> KernelsView | None:
    """The panel for `run`; None when there is nothing below XLA's choice to show."""
    path = run.job.path.value
    view = KernelsView(
        phrase=kernel_phrase(run.job.workload, path, run.params, run.extra),
        interpret=INTERPRET_WARNING in run.warnings,
    )
    if run.target is not None:
        view.schedules = list(run.target.kernels)
        view.dump = run.target.dump
    if run.job.path is not PathId.CUDA:  # the cuda panel shows its own kernel's resources
        view.resources = list(run.kernel_resources)
    view.artifacts = [n for n in BELOW_HLO if getattr(run.artifacts, n)]
    view.pipelines = [
        (name, f"/runs/{job_id}/pipeline/kernels/{quote(name, safe='')}")
        for name in run.kernel_pipelines
    ]
    if not (view.phrase or view.schedules or view.resources or view.pipelines):
        return None
    return view
