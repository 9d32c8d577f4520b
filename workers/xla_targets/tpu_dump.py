"""libtpu's own dumps of a TPU compile: each kernel's final VLIW bundles, its schedule
summary, and (with `--pipeline`) Mosaic's and the LLO passes.

The compile runs in a child process started with `LIBTPU_INIT_ARGS` (see `dump_child`), kept
between compiles (`dump_server`): libtpu dumps into the child's own folders, and each
compile's files are moved to the folders of the request.

- `--xla_jf_dump_to=D2 --xla_jf_dump_llo_text=true`: per program (XLA's own `TLP` and
  set-up programs, and one per kernel named by its HLO instruction: `boundary_matmul.1`,
  or an XLA fusion such as `fusion`) about 72 files `<stamp>-<program>-<NN>-<pass>.txt`,
  ending in `final_bundles` and `schedule-analysis_final_bundles` ("total scheduled
  bundles: 1067"). Plain XLA programs get bundles too, so XLA and Pallas compare.
- `--xla_mosaic_dump_to=D1 --xla_mosaic_enable_dump_debug_info=true`: per Mosaic kernel 18
  passes `<stamp>-<NNNN>-mosaic-dump-<kernel>-<step>.txt` (original → apply-vector-layout →
  lower-to-llo → finalize-llo), every op keeping its Python `loc`.

A compile without `--pipeline` reads three passes of each kernel, and goes to a kept child
of its own that dumps only those (`--xla_jf_dump_llo_pass_label_regex`): `original`, the
first whose text declares the kernel's VMEM allocations, and the final bundles with their
schedule analysis; a compile with `--pipeline` goes to the child that dumps every pass.
The same bundles and schedules, at a fraction of the cost: for the tests' own training step
on v6e:1x1, 198 files (4.3 MB) instead of 4,562 (91 MB), and a quarter of the CPU (2.0 to
2.9 s of the machine's against 9.5 to 12.1 s, the child started); its 8-device step on
v6e:2x4, 195 files instead of 4,500, the same 62 schedules.

What is kept is capped by BOUNDARY_PIPELINE_MAX_BYTES: every kernel's summary, then its
bundles, then passes; what was cut is said.
"""

from __future__ import annotations

import atexit
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from workers.protocol import KernelSchedule
from workers.xla_targets.dump_child import ChildCompile, Placement
from workers.xla_targets.dump_server import KeptChild
from workers.xla_targets.kernel_ir import sections

LIBTPU_DUMP_FLAGS = (
    "--xla_mosaic_dump_to={mosaic} --xla_mosaic_enable_dump_debug_info=true "
    "--xla_jf_dump_to={llo} --xla_jf_dump_llo_text=true"
)
"""libtpu's dump flags (as compile options they fail: "No such compile option"): every pass
of every kernel, for `--pipeline`."""
LEAN_PASSES = "original|final_bundles"
"""The LLO passes `read_llo` needs without `--pipeline` (a regex on the pass's label, which
also matches `schedule-analysis_final_bundles`)."""
LIBTPU_LEAN_FLAGS = (
    "--xla_jf_dump_to={llo} --xla_jf_dump_llo_text=true "
    f"--xla_jf_dump_llo_pass_label_regex={LEAN_PASSES}"
)
"""libtpu's dump flags for the bundles and schedules alone."""
XLA_PROGRAMS = ("TLP", "<late-finalization>", "<late-initialization>")
"""LLO dumps of XLA's own programs (the top-level program and its set-up), not kernels."""

_LLO_FILE = re.compile(r"^(?P<stamp>\d+)-(?P<kernel>.+)-(?P<order>\d{2,3})-(?P<pass>[^/]+)\.txt$")
_MOSAIC_FILE = re.compile(r"^(?P<stamp>\d+)-(?P<order>\d{4})-mosaic-dump-(?P<rest>.+)\.txt$")
_VMEM_ALLOC = re.compile(r"space=vmem, size = (0x[0-9a-f]+)")
_MXU_OP = re.compile(r"\bv[a-z0-9]*\.[a-z0-9.]*\bmxu\d\b")
_BUNDLES = re.compile(r"total scheduled bundles:\s+(\d+)")
_NON_EMPTY = re.compile(r"non empty scheduled bundles:\s*(\d+)")


@dataclass(frozen=True)
class PassStep:
    """One step of a kernel compiler's pipeline: the pass and the IR after it."""

    name: str
    text: str


@dataclass
class TpuDump:
    """libtpu's dumps of one compile, read back per kernel."""

    bundles: dict[str, str] = field(default_factory=dict)
    schedules: list[KernelSchedule] = field(default_factory=list)
    mosaic_passes: dict[str, list[PassStep]] = field(default_factory=dict)
    llo_passes: dict[str, list[PassStep]] = field(default_factory=dict)
    cut: str | None = None
    kept: int = 0
    child: ChildCompile | None = None


def _cap(max_bytes: int) -> str:
    return f"stopped at BOUNDARY_PIPELINE_MAX_BYTES ({max_bytes:,} bytes)"


def read_llo(folder: Path, max_bytes: int, passes: bool) -> TpuDump:
    """Schedule summaries (always), bundles, then LLO passes (when `passes`) per kernel from
    an `xla_jf_dump_to` folder, within `max_bytes`: every kernel's bundles before any
    kernel's passes."""
    dump = TpuDump()
    by_kernel: dict[str, list[tuple[int, str, Path]]] = {}
    for path in folder.iterdir() if folder.is_dir() else ():
        m = _LLO_FILE.match(path.name)
        if m is None or m.group("kernel").startswith(XLA_PROGRAMS):
            continue
        by_kernel.setdefault(m.group("kernel"), []).append(
            (int(m.group("order")), m.group("pass"), path)
        )
    budget = max_bytes
    for kernel, files in sorted(by_kernel.items()):
        files.sort()
        final = next((p for _, name, p in files if name == "final_bundles"), None)
        if final is None:
            continue
        text = final.read_text(errors="replace")
        dump.schedules.append(_schedule(kernel, files, text))
        size = len(text.encode())
        if size > budget:
            dump.cut = dump.cut or f"bundles of {kernel}: {_cap(max_bytes)}"
            continue
        budget -= size
        dump.bundles[kernel] = text
    for kernel, files in sorted(by_kernel.items()) if passes else ():
        steps: list[PassStep] = []
        for _, name, path in files:
            if name.startswith("schedule-analysis") or name == "fingerprints":
                continue
            step = path.read_text(errors="replace")
            if len(step.encode()) > budget:
                dump.cut = dump.cut or f"LLO passes of {kernel}: {_cap(max_bytes)}"
                break
            budget -= len(step.encode())
            steps.append(PassStep(name, step))
        dump.llo_passes[kernel] = steps
    dump.kept = max_bytes - budget
    return dump


def _schedule(kernel: str, files: list[tuple[int, str, Path]], bundles: str) -> KernelSchedule:
    analysis = next((p for _, name, p in files if name == "schedule-analysis_final_bundles"), None)
    head = analysis.read_text(errors="replace")[:4000] if analysis is not None else ""
    total, non_empty = _BUNDLES.search(head), _NON_EMPTY.search(head)
    ops = _MXU_OP.findall(bundles)
    return KernelSchedule(
        kernel=kernel,
        bundles=int(total.group(1)) if total else 0,
        non_empty_bundles=int(non_empty.group(1)) if non_empty else 0,
        mxu_ops=len(ops),
        mxu_pushes=sum(1 for op in ops if op.startswith("vmatpush")),
        vmem_bytes=_vmem_bytes(files),
    )


def _vmem_bytes(files: list[tuple[int, str, Path]]) -> int | None:
    """VMEM the kernel allocates: the `space=vmem` allocations its LLO starts with (the
    blocks' windows, double-buffered when the grid has more than one step, the scratch
    operands, and Mosaic's internal scratch, 72 KiB on v6e). Later passes drop some
    declarations from the text, so the first pass that has them is read."""
    for _, name, path in files:
        if name in ("fingerprints", "pre-auto-mxu-assigner") or name.startswith("schedule"):
            continue
        sizes = _VMEM_ALLOC.findall(path.read_text(errors="replace"))
        if sizes:
            return sum(int(s, 16) for s in sizes)
    return None


def read_mosaic(folder: Path, max_bytes: int) -> tuple[dict[str, list[PassStep]], str | None]:
    """Mosaic's passes per kernel from an `xla_mosaic_dump_to` folder, `original` first,
    within `max_bytes` (and why they stopped, when they did). libtpu's extra
    `post-deserialization` copies of each module are left out."""
    groups: dict[str, list[tuple[int, str, Path]]] = {}
    for path in folder.iterdir() if folder.is_dir() else ():
        m = _MOSAIC_FILE.match(path.name)
        if m is None or m.group("rest").endswith("post-deserialization"):
            continue
        step = re.sub(r"^.*?-(original|post-.+|pre-.+)$", r"\1", m.group("rest"))
        groups.setdefault(m.group("stamp"), []).append((int(m.group("order")), step, path))
    found: dict[str, list[PassStep]] = {}
    budget = max_bytes
    for _, files in sorted(groups.items()):
        steps = []
        for _, name, path in sorted(files):
            text = path.read_text(errors="replace")
            if len(text.encode()) > budget:
                return found, f"Mosaic passes: {_cap(max_bytes)}"
            budget -= len(text.encode())
            steps.append(PassStep(name, text))
        head = re.search(r"func\.func @([\w$.]+)", steps[0].text) if steps else None
        name = head.group(1) if head else f"kernel{len(found)}"
        while name in found:
            name += "'"
        if steps:
            found[name] = steps
    return found, None


def _libtpu_flags(dirs: dict[str, Path]) -> dict[str, str]:
    return {"LIBTPU_INIT_ARGS": LIBTPU_DUMP_FLAGS.format(mosaic=dirs["mosaic"], llo=dirs["llo"])}


def _lean_flags(dirs: dict[str, Path]) -> dict[str, str]:
    return {"LIBTPU_INIT_ARGS": LIBTPU_LEAN_FLAGS.format(llo=dirs["llo"])}


_KEPT = KeptChild(("mosaic", "llo"), _libtpu_flags)
"""This process's libtpu dump child for compiles with their passes, kept between compiles."""
_KEPT_LEAN = KeptChild(("llo",), _lean_flags)
"""…and for compiles without: bundles and schedules only."""
atexit.register(_KEPT.close)
atexit.register(_KEPT_LEAN.close)


def tpu_dump(exported: bytes, place: Placement, max_bytes: int, passes: bool) -> TpuDump:
    """libtpu's dumps of one compile of `exported` in the kept dump child, read back."""
    with tempfile.TemporaryDirectory(prefix="boundary-tpu-dump-") as name:
        folder = Path(name)
        mosaic_dir, llo_dir = folder / "mosaic", folder / "llo"
        if passes:
            child = _KEPT.compile(exported, place, folder, {"mosaic": mosaic_dir, "llo": llo_dir})
        else:
            child = _KEPT_LEAN.compile(exported, place, folder, {"llo": llo_dir})
        dump = read_llo(llo_dir, max_bytes, passes)
        if passes:
            dump.mosaic_passes, cut = read_mosaic(mosaic_dir, max_bytes - dump.kept)
            dump.cut = dump.cut or cut
        dump.child = child
    return dump


def bundles_text(dump: TpuDump) -> str | None:
    """The `bundles` artifact: each kernel's schedule summary, then its final bundles."""
    by_name = {s.kernel: s for s in dump.schedules}
    parts = []
    for kernel, text in dump.bundles.items():
        s = by_name.get(kernel)
        head = ""
        if s is not None:
            vmem = f"{s.vmem_bytes:,} bytes" if s.vmem_bytes is not None else "not found"
            head = (
                f"// schedule: {s.bundles} bundles, {s.non_empty_bundles} non-empty, "
                f"{s.mxu_ops} MXU ops ({s.mxu_pushes} weight pushes), VMEM used {vmem}\n"
            )
        parts.append((kernel, head + text))
    joined = sections(parts)
    if joined is not None and dump.cut:
        joined += f"// cut: {dump.cut}\n"
    return joined
