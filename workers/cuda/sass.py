"""Reading what the CUDA compiler produced: one kernel's PTX, its SASS, its resources.

- `ptx_for(ptx, name)`: the PTX module cut down to one kernel (its header, the module's
  global declarations, the helper functions it calls and the kernel itself).
- `disassemble(cubin, name)`: SASS from the cubin through cuobjdump (or nvdisasm),
  with the hexadecimal encodings stripped so the instructions read easily; a process
  lists a cubin once and cuts each kernel from that listing.
- `parse_ptxas_log` / `parse_res_usage`: the resource report per kernel (registers,
  shared memory, stack, spills) from `ptxas -v`, or from `cuobjdump -res-usage`.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from workers.cuda.env import CudaTools, detect_tools
from workers.cuda.listings import KEPT, Listings
from workers.protocol import KernelResources

TIMEOUT_S = 120

# --- PTX ---------------------------------------------------------------------------------

_FUNCTION = re.compile(
    r"^(?:\.(?:visible|weak|extern)\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\("
)
_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$]+)")
_MODULE_DECL = re.compile(r"^\.(?:global|const|shared|extern)\b")


def _ptx_parts(ptx: str) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """Split PTX into header lines, module-level declarations and function bodies."""
    header: list[str] = []
    declarations: list[str] = []
    functions: dict[str, list[str]] = {}
    current: list[str] | None = None
    seen_function = False
    for line in ptx.splitlines():
        if current is not None:
            current.append(line)
            if line.startswith("}"):
                current = None
            continue
        found = _FUNCTION.match(line)
        if found and not line.rstrip().endswith(";"):
            seen_function = True
            current = functions.setdefault(found.group(1), [])
            current.append(line)
        elif _MODULE_DECL.match(line):
            declarations.append(line)
        elif not seen_function and (not header or not header[-1].startswith(".address_size")):
            header.append(line)  # it ends at .address_size; later top-level comments drop
    return header, declarations, functions


def ptx_for(ptx: str, name: str) -> str | None:
    """The PTX of kernel `name` alone, with what it needs to read as a module; None if the
    module has no such kernel."""
    header, declarations, functions = _ptx_parts(ptx)
    if name not in functions:
        return None
    wanted = [name]
    for function in wanted:  # grows as callees are found: helper .func bodies come along
        for line in functions[function]:
            for callee in _CALL.findall(line):
                if callee in functions and callee not in wanted:
                    wanted.append(callee)
    body: list[str] = []
    for function in reversed(wanted):  # helpers before their callers, as PTX declares them
        body += functions[function] + [""]
    parts = [*header, "", *declarations, "", *body] if declarations else [*header, "", *body]
    return "\n".join(parts).rstrip() + "\n"


def ptx_kernels(ptx: str) -> list[str]:
    """The names of every kernel entry in a PTX module."""
    return re.findall(r"^\.visible\s+\.entry\s+([\w$]+)\s*\(", ptx, flags=re.MULTILINE)


# --- SASS --------------------------------------------------------------------------------

_ENCODING_ONLY = re.compile(r"^\s*/\* 0x[0-9a-f]{16} \*/\s*$")
_TRAILING_ENCODING = re.compile(r"\s*/\* 0x[0-9a-f]{16} \*/\s*$")


def clean_sass(text: str) -> str:
    """SASS with the instruction encodings (hex comments) removed and blank runs folded."""
    lines = []
    for line in text.splitlines():
        if _ENCODING_ONLY.match(line):
            continue
        lines.append(_TRAILING_ENCODING.sub("", line).rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n") + "\n"


@dataclass(frozen=True)
class Disassembly:
    """SASS text (None when no disassembler could produce it) and how it was made."""

    text: str | None
    tool: str | None
    note: str | None = None


def _nvdisasm_function(text: str, name: str) -> str | None:
    """One function's section of nvdisasm output."""
    start = re.search(rf"^\s*\.section\s+\.text\.{re.escape(name)}\b.*$", text, flags=re.MULTILINE)
    if start is None:
        return None
    following = re.search(r"^\s*\.section\s", text[start.end() :], flags=re.MULTILINE)
    end = start.end() + following.start() if following else len(text)
    return text[start.start() : end]


class _ToolFailed(Exception):
    """The disassembler ran and refused; the message is the end of what it said."""


def _listing(command: list[str], cubin: Path) -> str:
    """What `command` prints for the whole of `cubin`: run once per cubin content and
    disassembler."""

    def run() -> tuple[str]:
        done = subprocess.run(
            [*command, str(cubin)], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            raise _ToolFailed(done.stderr.strip()[-500:])
        return (done.stdout,)

    key = Listings.key(Listings.disassembler(command[0]), *command[1:], cubin.read_bytes())
    return KEPT.made(key, run)[0]


def cuobjdump_functions(listing: str) -> list[tuple[str, str]]:
    """(kernel name, its section) of a `cuobjdump -sass` listing, in the listing's order."""
    parts = re.split(r"^\s*Function : ([\w$]+)\s*$", listing, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def _cuobjdump_function(text: str, name: str) -> str | None:
    """One function's section of a cuobjdump listing, under the listing's `code for` line."""
    section = dict(cuobjdump_functions(text)).get(name)
    if section is None:
        return None
    code = re.search(r"^\s*code for \w+\s*$", text, flags=re.MULTILINE)
    return (code.group(0) + "\n" if code else "") + f"\t\tFunction : {name}\n{section}"


def disassemble(cubin: Path, name: str | None, tools: CudaTools | None = None) -> Disassembly:
    """SASS of kernel `name` (every kernel when None) in `cubin`, cut from the cubin's
    whole listing, which a process makes once per cubin content."""
    tools = tools or detect_tools()
    if tools.cuobjdump is not None:
        command, tool, cut = [tools.cuobjdump, "-sass"], "cuobjdump -sass", _cuobjdump_function
    elif tools.nvdisasm is not None:
        command, tool, cut = [tools.nvdisasm, "-c"], "nvdisasm -c", _nvdisasm_function
    else:
        return Disassembly(
            None,
            None,
            "no SASS: neither cuobjdump nor nvdisasm was found "
            "(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)",
        )
    try:
        listing = _listing(command, cubin)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Disassembly(None, tool, f"no SASS: {tool} could not run ({exc})")
    except _ToolFailed as exc:
        return Disassembly(None, tool, f"no SASS: {tool} failed: {exc}")
    if name is None:
        return Disassembly(clean_sass(listing), tool)
    section = cut(listing, name)
    if section is None:
        return Disassembly(None, tool, f"no SASS: {name} is not in the cubin")
    return Disassembly(clean_sass(section), tool)


# --- resources ---------------------------------------------------------------------------

_COMPILING = re.compile(r"Compiling entry function '([\w$]+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_log(log: str, arch: str) -> list[KernelResources]:
    """Per-kernel resources from the output of `ptxas -v` (nvcc -Xptxas -v, or NVRTC's
    --ptxas-options=-v). Kernels appear in the order ptxas compiled them."""
    found: list[KernelResources] = []
    current: KernelResources | None = None
    for line in log.splitlines():
        entry = _COMPILING.search(line)
        if entry:
            current = KernelResources(name=entry.group(1), arch=entry.group(2) or arch)
            found.append(current)
            continue
        if current is None:
            continue
        frame = _FRAME.search(line)
        if frame:
            current.stack_bytes = int(frame.group(1))
            current.spill_store_bytes = int(frame.group(2))
            current.spill_load_bytes = int(frame.group(3))
        used = _USED.search(line)
        if used:
            current.registers = int(used.group(1))
            barriers = _BARRIERS.search(line)
            current.barriers = int(barriers.group(1)) if barriers else None
            smem = _SMEM.search(line)
            current.shared_bytes = int(smem.group(1)) if smem else 0
            cmem = _CMEM.search(line)
            current.constant_bytes = int(cmem.group(1)) if cmem else None
    return found


_RES_FUNCTION = re.compile(r"^\s*Function ([\w$]+):\s*$")
_RES_FIELD = re.compile(r"(REG|STACK|SHARED|LOCAL|CONSTANT\[0\]):(\d+)")


def parse_res_usage(text: str, arch: str) -> list[KernelResources]:
    """Per-kernel resources from `cuobjdump -res-usage` (no spill figures: it has none;
    its SHARED includes the memory the hardware reserves for itself)."""
    found: list[KernelResources] = []
    current: KernelResources | None = None
    for line in text.splitlines():
        head = _RES_FUNCTION.match(line)
        if head:
            current = KernelResources(name=head.group(1), arch=arch, source="cuobjdump -res-usage")
            found.append(current)
            continue
        if current is None:
            continue
        fields = dict(_RES_FIELD.findall(line))
        if fields:
            current.registers = int(fields["REG"]) if "REG" in fields else None
            current.stack_bytes = int(fields["STACK"]) if "STACK" in fields else None
            current.shared_bytes = int(fields["SHARED"]) if "SHARED" in fields else None
            current.constant_bytes = int(fields["CONSTANT[0]"]) if "CONSTANT[0]" in fields else None
            current = None
    return found


def resources(
    log: str, cubin: Path, arch: str, names: list[str], tools: CudaTools | None = None
) -> list[KernelResources]:
    """The resources of kernels `names`: from the ptxas log, else from cuobjdump."""
    by_name = {r.name: r for r in parse_ptxas_log(log, arch)}
    missing = [n for n in names if n not in by_name]
    tools = tools or detect_tools()
    if missing and tools.cuobjdump is not None:
        try:
            done = subprocess.run(
                [tools.cuobjdump, "-res-usage", str(cubin)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0:
            for res in parse_res_usage(done.stdout, arch):
                by_name.setdefault(res.name, res)
    return [by_name[n] for n in names if n in by_name]
