"""The PTX of XLA's own kernels, read from a per-compile dump (GPU targets).

XLA:GPU writes one `*.ptx` file per LLVM module it generated into the folder named by
the compile option `xla_dump_to`. Some files are empty (a module whose kernels were all
library calls); some hold several kernel entries. The run shows one section per kernel,
each a module of its own (header, declarations, the entry and the helpers it calls).
"""

from __future__ import annotations

from pathlib import Path

from workers.cuda.sass import ptx_for, ptx_kernels

SECTION = "// ===== kernel {name} ({file}) ====="
"""The line that opens each kernel's section of the PTX artifact."""


def ptx_modules(folder: Path) -> dict[str, str]:
    """Every PTX file of the dump that holds a kernel entry: file name → its text."""
    found: dict[str, str] = {}
    for file in sorted(folder.glob("*.ptx")):
        text = file.read_text(encoding="utf-8", errors="replace")
        if ptx_kernels(text):
            found[file.name] = text
    return found


def module_sections(file: str, text: str) -> list[str]:
    """The artifact's sections of one PTX module: one per kernel entry."""
    return [
        f"{SECTION.format(name=name, file=file)}\n{body}"
        for name in ptx_kernels(text)
        if (body := ptx_for(text, name)) is not None
    ]
