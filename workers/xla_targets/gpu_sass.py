"""SASS for every kernel of a GPU compile: XLA's fusions, Triton and Mosaic GPU kernels.

XLA compiles its PTX inside the CUDA plugin and keeps the cubin to itself; without a GPU
only the PTX reaches the dump. Each PTX module is assembled again here, for the
architecture its `.target` names (sm_90a, sm_100a), by `ptxas -v` from the
nvidia-cuda-nvcc wheel (first on PATH: `workers.compiler.jaxenv`), which also reports
each kernel's registers, spills, stack and static shared memory; `cuobjdump -sass` then
prints the machine code.

XLA writes a module per kernel (65 for a small transformer's train step), and each
cuobjdump starts an nvdisasm that spends about 0.4 s of CPU before it reads a byte, so
modules that hold nothing but kernel entries (and the same `.extern` declarations) are
assembled together, one ptxas and one cuobjdump for all that share a `.target`: ptxas
compiles each entry on its own, and every kernel's SASS and resources come out the same
as from its module alone (tests/workers/test_gpu_sass.py compares them). A module with
anything else at its top level (a `.func`, a `.global`), a kernel name seen before, or a
batch ptxas refuses, is assembled alone, as before. A unit this process already assembled
(the same PTX, architecture and tools) is read from what the tools printed then
(`workers/cuda/listings.py`).

This is our assembly of XLA's PTX, with the same ptxas version XLA's own build uses here:
a real GPU's driver may assemble it differently (the page says so).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from workers.cuda.env import find_tool
from workers.cuda.listings import KEPT, Listings
from workers.cuda.sass import clean_sass, cuobjdump_functions, parse_ptxas_log
from workers.protocol import KernelResources

TIMEOUT_S = 120
SECTION = "// ===== kernel {name} ({file}) ====="
"""The line that opens each kernel's section (as in the PTX artifact)."""
SASS_NOTE = (
    "SASS: each PTX module assembled here by ptxas {version} (nvidia-cuda-nvcc) for its "
    ".target, and disassembled by cuobjdump; registers and spills are ptxas's report"
)


@dataclass
class GpuSass:
    """Every kernel's SASS (the `sass` artifact), its resources, and what it cost."""

    text: str | None = None
    resources: list[KernelResources] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def ptx_target(ptx: str) -> str | None:
    """The `.target` of a PTX module (sm_90a, sm_100a)."""
    found = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.MULTILINE)
    return found.group(1) if found else None


@dataclass(frozen=True)
class _Unit:
    """PTX that one ptxas and one cuobjdump assemble: a module, or several joined."""

    label: str
    """The module file named in a problem: the module's, or a batch's first."""
    ptx: str
    files: dict[str, str]
    """A batch's kernels, each with its own module file (empty for a module alone)."""


@dataclass(frozen=True)
class _Assembled:
    """A unit's kernels as (module file, SASS section), their resources as (module file,
    resources), or its problem."""

    sections: list[tuple[str, str]]
    resources: list[tuple[str, KernelResources]]
    problem: str | None


@dataclass(frozen=True)
class _Entries:
    """A module made only of kernel entries: its header, its `.extern` lines, the rest."""

    header: tuple[str, ...]
    externs: tuple[str, ...]
    body: str
    kernels: tuple[str, ...]


_HEADER = re.compile(r"^\s*\.(?:version|target|address_size)\b")
_ENTRY = re.compile(r"^\s*\.visible\s+\.entry\s+([\w$]+)\s*\(")
_ENTRY_DIRECTIVE = (".reqntid", ".maxntid", ".minnctapersm", ".maxnreg", ".param")
"""What may stand at a module's top level between its entries: an entry's own parameters
and launch bounds."""


def _entries_only(ptx: str) -> _Entries | None:
    """The module cut into header, declarations and entries; None when its top level holds
    anything else, which joining could clash (a `.func`, a `.global`, a `.const`, an
    `.extern` over several lines)."""
    header: list[str] = []
    externs: list[str] = []
    body: list[str] = []
    kernels: list[str] = []
    depth = 0  # braces and parentheses open
    for line in ptx.splitlines():
        text = line.strip()
        top = depth == 0 and text and not text.startswith("//")
        entry = _ENTRY.match(line)
        if top and not body and _HEADER.match(line):
            header.append(text)
            continue
        if top and not body and text.startswith(".extern") and text.endswith(";"):
            externs.append(text)
            continue
        if entry:
            kernels.append(entry.group(1))
        elif top and text[0] not in "{})" and not text.startswith(_ENTRY_DIRECTIVE):
            return None
        if body or entry:
            body.append(line)
        code = line.split("//", 1)[0]
        depth += code.count("{") + code.count("(") - code.count("}") - code.count(")")
    if not kernels or depth != 0:
        return None
    return _Entries(tuple(header), tuple(externs), "\n".join(body), tuple(kernels))


def _extern_name(line: str) -> str:
    """The symbol an `.extern` line declares (`global_smem` of `... .b8 global_smem[];`)."""
    found = re.search(r"([\w$]+)\s*(?:\[[^\]]*\])?\s*;$", line)
    return found.group(1) if found else line


@dataclass
class _Batch:
    """The modules of entries joined for one header: each kernel name once, each `.extern`
    symbol declared one way."""

    members: list[tuple[str, _Entries]] = field(default_factory=list)
    kernels: set[str] = field(default_factory=set)
    externs: dict[str, str] = field(default_factory=dict)
    """An `.extern` symbol's name → its declaration, in the order first declared."""

    def admits(self, parts: _Entries) -> bool:
        same = all(self.externs.get(_extern_name(e), e) == e for e in parts.externs)
        return same and not self.kernels & set(parts.kernels)

    def add(self, file: str, parts: _Entries) -> None:
        self.members.append((file, parts))
        self.kernels.update(parts.kernels)
        self.externs.update((_extern_name(e), e) for e in parts.externs)

    def unit(self, header: tuple[str, ...]) -> _Unit:
        bodies = (parts.body for _, parts in self.members)
        text = "\n".join([*header, "", *self.externs.values(), "", *bodies])
        files = {kernel: file for file, parts in self.members for kernel in parts.kernels}
        return _Unit(self.members[0][0], text + "\n", files)


def _units(modules: dict[str, str]) -> list[_Unit]:
    """The modules as assembly units: those made only of entries joined per header, each
    kernel name once; every other module alone."""
    units: list[_Unit] = []
    batches: dict[tuple[str, ...], _Batch] = {}
    for file, ptx in modules.items():
        parts = _entries_only(ptx)
        batch = batches.setdefault(parts.header, _Batch()) if parts else None
        if parts is None or batch is None or not batch.admits(parts):
            units.append(_Unit(file, ptx, {}))
        else:
            batch.add(file, parts)
    return units + [batch.unit(header) for header, batch in batches.items() if batch.members]


class _Refused(Exception):
    """ptxas refused a unit; the message is the end of what it said."""


def _tools_on(ptx: str, arch: str, ptxas: str, cuobjdump: str) -> tuple[str, str]:
    """ptxas's report and cuobjdump's listing for `ptx` assembled for `arch`: run once
    per process for the same PTX and tools."""

    def run() -> tuple[str, str]:
        with tempfile.TemporaryDirectory(prefix="boundary-sass-") as folder:
            source, cubin = Path(folder) / "k.ptx", Path(folder) / "k.cubin"
            source.write_text(ptx)
            done = subprocess.run(
                [ptxas, "-v", f"-arch={arch}", "-o", str(cubin), str(source)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                raise _Refused(done.stderr.strip()[-300:])
            listing = subprocess.run(
                [cuobjdump, "-sass", str(cubin)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=True,
            ).stdout
        return done.stdout + done.stderr, listing

    key = Listings.key(Listings.tool(ptxas), Listings.disassembler(cuobjdump), arch, ptx)
    report, listing = KEPT.made(key, run)
    return report, listing


def _assemble(unit: _Unit, ptxas: str, cuobjdump: str) -> _Assembled:
    """One unit through ptxas and cuobjdump: its kernels' sections and resources."""
    arch = ptx_target(unit.ptx) or "sm_90a"
    try:
        report, listing = _tools_on(unit.ptx, arch, ptxas, cuobjdump)
    except _Refused as exc:
        return _Assembled([], [], f"{unit.label}: ptxas refused it for {arch}: {exc}")
    except (OSError, subprocess.SubprocessError) as exc:
        return _Assembled([], [], f"{unit.label}: {exc}")
    found = parse_ptxas_log(report, arch)
    by_name = {r.name: r for r in found}
    sections = []
    for name, section in cuobjdump_functions(listing):
        body = clean_sass(section)
        r = by_name.get(name)
        head = ""
        if r is not None:
            head = (
                f"// {arch}: {r.registers} registers, {r.spill_store_bytes} bytes spill stores, "
                f"{r.spill_load_bytes} bytes spill loads, {r.stack_bytes} bytes stack, "
                f"{r.shared_bytes} bytes static shared memory\n"
            )
        file = unit.files.get(name, unit.label)
        sections.append((file, f"{SECTION.format(name=name, file=file)}\n{head}{body}"))
    resources = [(unit.files.get(r.name, unit.label), r) for r in found]
    return _Assembled(sections, resources, None)


def _assembled(
    unit: _Unit, modules: dict[str, str], ptxas: str, cuobjdump: str
) -> list[_Assembled]:
    """A unit assembled; a batch that ptxas refuses, module by module instead, so that
    the problem names the module."""
    done = _assemble(unit, ptxas, cuobjdump)
    if done.problem is None or not unit.files:
        return [done]
    files = dict.fromkeys(unit.files.values())
    return [_assemble(_Unit(file, modules[file], {}), ptxas, cuobjdump) for file in files]


def gpu_sass(modules: dict[str, str]) -> GpuSass:
    """SASS and resources of every kernel in `modules` (PTX file name → its text), in the
    modules' order."""
    out = GpuSass()
    ptxas, cuobjdump = find_tool("ptxas"), find_tool("cuobjdump")
    if ptxas is None or cuobjdump is None:
        out.problems.append(
            "no SASS: ptxas or cuobjdump was not found "
            "(pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump)"
        )
        return out
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:  # ptxas and cuobjdump are processes
        units = pool.map(lambda unit: _assembled(unit, modules, ptxas, cuobjdump), _units(modules))
        done = [assembled for each in units for assembled in each]
    place = {file: index for index, file in enumerate(modules)}

    def in_place(item: tuple[str, object]) -> int:  # a stable sort's key: the module's place
        return place.get(item[0], len(place))

    sections = sorted((s for a in done for s in a.sections), key=in_place)
    resources = sorted((r for a in done for r in a.resources), key=in_place)
    out.resources = [r for _, r in resources]
    out.problems += [a.problem for a in done if a.problem]
    out.text = "\n".join(text for _, text in sections) if sections else None
    out.seconds = time.perf_counter() - started
    return out


def ptxas_version() -> str | None:
    """The version of the ptxas SASS is assembled with, e.g. '13.5'."""
    ptxas = find_tool("ptxas")
    if ptxas is None:
        return None
    try:
        done = subprocess.run(
            [ptxas, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"release (\d+\.\d+)", done.stdout)
    return found.group(1) if found else None
