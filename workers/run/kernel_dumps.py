"""What a compile for a target without the hardware adds, down to machine code: the
kernels' own IR, TPU bundles with their schedules, GPU PTX and SASS with each kernel's
registers and spills, and (with `--pipeline`) each Pallas kernel's compiler passes.

None of it is the timed compile:

- TPU: `mosaic` is decoded from the lowered program. The bundles (of XLA's fusions and
  Pallas kernels alike) and the Mosaic and LLO passes come from one compile of the
  program, exported, in a child process started with libtpu's dump flags.
- GPU: `triton` and `mosaic_gpu` are decoded from the lowered program. XLA's per-compile
  dump gives the PTX of XLA's fusions and Triton kernels (and, with `--pipeline`, a
  second such compile the IR before each Triton pass); a Mosaic GPU kernel's PTX and
  passes come from a compile in a child with Mosaic GPU's dump on. Every PTX module then
  goes through ptxas and cuobjdump for its SASS.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.catalog.kernels import KernelChoice
from workers.compiler.options import compile_options
from workers.compiler.pipeline import read_reports
from workers.pallas.lowering import lowering_for
from workers.protocol import KernelResources, KernelSchedule, PipelineCapture, Target
from workers.xla_targets.dump_child import Placement, export_program
from workers.xla_targets.gpu_sass import SASS_NOTE, gpu_sass, ptxas_version
from workers.xla_targets.kernel_ir import kernel_ir
from workers.xla_targets.kernel_passes import after_steps, kernel_capture, read_triton_passes
from workers.xla_targets.mosaic_gpu_dump import mosaic_gpu_dump
from workers.xla_targets.ptx_dump import module_sections, ptx_modules
from workers.xla_targets.tpu_dump import bundles_text, tpu_dump


@dataclass
class KernelArtifacts:
    """Everything below the optimized HLO that a deviceless compile gave."""

    mosaic: str | None = None
    bundles: str | None = None
    triton: str | None = None
    mosaic_gpu: str | None = None
    ptx: str | None = None
    sass: str | None = None
    schedules: list[KernelSchedule] = field(default_factory=list)
    resources: list[KernelResources] = field(default_factory=list)
    pipelines: dict[str, PipelineCapture] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    """GPU compiler reports (fusion decisions, launch order) from XLA's dump."""
    notes: list[str] = field(default_factory=list)
    dump: str | None = None
    """How the child's dump compile went, for the target report."""
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Lowered:
    """What the dumps start from: the jitted function, its abstract arguments, the lowered
    program, where it was lowered, and the kernel choice it was built with."""

    jitted: Any
    abstract: list[Any]
    lowered: Any
    place: Placement
    mesh: Any | None
    device: Any
    choice: KernelChoice | None


def _export(program: Lowered, platform: str) -> bytes:
    with lowering_for(program.choice, program.mesh, program.device):
        return export_program(program.jitted, program.abstract, platform)


def tpu_artifacts(program: Lowered, *, passes: bool, max_bytes: int) -> KernelArtifacts:
    """A TPU compile's kernels: Mosaic MLIR, bundles and schedules, and their passes."""
    out = KernelArtifacts(mosaic=kernel_ir(program.lowered).mosaic)
    t0 = time.perf_counter()
    try:
        dump = tpu_dump(_export(program, "tpu"), program.place, max_bytes, passes)
    except (RuntimeError, ValueError) as exc:  # export refused the program, or the child failed
        out.notes.append(f"no bundles: {str(exc)[:400]}")
        return out
    out.seconds["bundle_dump"] = time.perf_counter() - t0
    out.bundles, out.schedules = bundles_text(dump), dump.schedules
    if dump.cut:
        out.notes.append(f"bundles cut short: {dump.cut}")
    if dump.child is not None:
        own = dump.child.compile_s
        out.dump = (
            "bundles: libtpu's LLO dump from one more compile of the exported program in a "
            f"dump process kept between compiles (this request {dump.child.wall_s:.2f} s"
            + (f", its compile {own:.2f} s" if own is not None else "")
            + "), not part of the compile time reported"
        )
    for kernel, steps in dump.mosaic_passes.items():
        llo = next((v for k, v in dump.llo_passes.items() if k.split(".")[0] == kernel), [])
        capture = kernel_capture([("mosaic", steps), ("llo", llo)], max_bytes)
        capture.cut = capture.cut or dump.cut
        out.pipelines[kernel] = capture
    return out


def gpu_artifacts(program: Lowered, *, passes: bool, max_bytes: int) -> KernelArtifacts:
    """A GPU compile's kernels: Triton and Mosaic GPU IR, every kernel's PTX and SASS."""
    decoded = kernel_ir(program.lowered)
    out = KernelArtifacts(triton=decoded.triton, mosaic_gpu=decoded.mosaic_gpu)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="boundary-xla-dump-") as folder:
        # The fusion pass writes its decisions only when its own pass is dumped.
        dump = {"xla_dump_to": folder, "xla_dump_hlo_pass_re": "priority-fusion"}
        program.lowered.compile(compiler_options=compile_options(program.place.options, dump))
        modules = ptx_modules(Path(folder))
        out.reports = read_reports(Path(folder), max_bytes)
    out.seconds["dump_compile"] = time.perf_counter() - t0
    if passes and decoded.triton:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="boundary-triton-dump-") as folder:
            dump = {"xla_dump_to": folder, "xla_dump_emitter_re": ".*"}
            program.lowered.compile(compiler_options=compile_options(program.place.options, dump))
            found = read_triton_passes(Path(folder))
        spent = time.perf_counter() - t0
        for name, steps in found.items():
            out.pipelines[name] = kernel_capture([("triton", after_steps(steps))], max_bytes, spent)
        out.seconds["triton_passes"] = spent
    if decoded.mosaic_gpu_kernels:
        t0 = time.perf_counter()
        try:
            mdump = mosaic_gpu_dump(_export(program, "cuda"), program.place, passes)
        except (RuntimeError, ValueError) as exc:
            out.notes.append(f"no Mosaic GPU PTX: {str(exc)[:400]}")
        else:
            modules.update(mdump.ptx)
            for kernel, steps in mdump.passes.items():
                capture = kernel_capture([("mosaic_gpu", after_steps(steps))], max_bytes)
                out.pipelines[f"mosaic_gpu.{kernel}"] = capture
            if mdump.child is not None:
                out.dump = (
                    "Mosaic GPU's PTX: its own dump, from one more compile of the exported "
                    f"program in a child process ({mdump.child.wall_s:.2f} s), not part of "
                    "the compile time reported"
                )
        out.seconds["mosaic_gpu_dump"] = time.perf_counter() - t0
    sections = [s for file, text in modules.items() for s in module_sections(file, text)]
    out.ptx = "\n".join(sections) if sections else None
    sass = gpu_sass(modules)
    out.sass, out.resources = sass.text, sass.resources
    out.notes += sass.problems
    if sass.text is not None:
        out.notes.append(SASS_NOTE.format(version=ptxas_version() or "?"))
    out.seconds["sass"] = sass.seconds
    return out


def dump_artifacts(
    program: Lowered, target: Target, *, passes: bool, max_bytes: int
) -> KernelArtifacts:
    """The target's kernels below the optimized HLO (see the module docstring)."""
    if target.chip.cuda_arch is None:
        return tpu_artifacts(program, passes=passes, max_bytes=max_bytes)
    return gpu_artifacts(program, passes=passes, max_bytes=max_bytes)
