"""SASS for every kernel of a GPU compile: XLA's fusions, Triton and Mosaic GPU kernels.

XLA compiles its PTX inside the CUDA plugin and keeps the cubin to itself; without a GPU
only the PTX reaches the dump. Each PTX module is assembled again here, for the
architecture its `.target` names (sm_90a, sm_100a), by `ptxas -v` from the
nvidia-cuda-nvcc wheel (first on PATH: `workers.compiler.jaxenv`), which also reports
each kernel's registers, spills, stack and static shared memory; `cuobjdump -sass` then
prints the machine code. One ptxas and one cuobjdump per module, two modules at a time.

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
from workers.cuda.sass import clean_sass, parse_ptxas_log
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


def _functions(listing: str) -> list[tuple[str, str]]:
    """(kernel name, its SASS) from `cuobjdump -sass`."""
    parts = re.split(r"^\s*Function : ([\w$]+)\s*$", listing, flags=re.MULTILINE)
    return [(parts[i], clean_sass(parts[i + 1])) for i in range(1, len(parts) - 1, 2)]


def _module(
    file: str, ptx: str, ptxas: str, cuobjdump: str
) -> tuple[list[str], list[KernelResources], str | None]:
    """(SASS sections, resources, a problem) of one PTX module."""
    arch = ptx_target(ptx) or "sm_90a"
    with tempfile.TemporaryDirectory(prefix="boundary-sass-") as folder:
        source, cubin = Path(folder) / "k.ptx", Path(folder) / "k.cubin"
        source.write_text(ptx)
        try:
            done = subprocess.run(
                [ptxas, "-v", f"-arch={arch}", "-o", str(cubin), str(source)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                return [], [], f"{file}: ptxas refused it for {arch}: {done.stderr.strip()[-300:]}"
            listing = subprocess.run(
                [cuobjdump, "-sass", str(cubin)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            return [], [], f"{file}: {exc}"
    found = parse_ptxas_log(done.stdout + done.stderr, arch)
    by_name = {r.name: r for r in found}
    parts = []
    for name, body in _functions(listing):
        r = by_name.get(name)
        head = ""
        if r is not None:
            head = (
                f"// {arch}: {r.registers} registers, {r.spill_store_bytes} bytes spill stores, "
                f"{r.spill_load_bytes} bytes spill loads, {r.stack_bytes} bytes stack, "
                f"{r.shared_bytes} bytes static shared memory\n"
            )
        parts.append(f"{SECTION.format(name=name, file=file)}\n{head}{body}")
    return parts, found, None


def gpu_sass(modules: dict[str, str]) -> GpuSass:
    """SASS and resources of every kernel in `modules` (PTX file name → its text)."""
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
        done = list(
            pool.map(lambda item: _module(item[0], item[1], ptxas, cuobjdump), modules.items())
        )
    sections: list[str] = []
    for parts, resources, problem in done:
        sections += parts
        out.resources += resources
        if problem:
            out.problems.append(problem)
    out.text = "\n".join(sections) if sections else None
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
