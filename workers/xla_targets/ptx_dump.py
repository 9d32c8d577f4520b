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


def kernel_sections(folder: Path) -> list[tuple[str, str]]:
    """(kernel name, its PTX) for every kernel entry in the dump's PTX files, in file order."""
    sections: list[tuple[str, str]] = []
    for file in sorted(folder.glob("*.ptx")):
        text = file.read_text(encoding="utf-8", errors="replace")
        if not text.strip():
            continue
        for name in ptx_kernels(text):
            body = ptx_for(text, name)
            if body is not None:
                sections.append((name, f"{SECTION.format(name=name, file=file.name)}\n{body}"))
    return sections


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


def kernels_ptx(folder: Path) -> str | None:
    """The PTX artifact of a GPU compile: every kernel's section, or None when XLA wrote
    no kernel of its own (every operation went to a library)."""
    sections = kernel_sections(folder)
    return "\n".join(body for _, body in sections) if sections else None
