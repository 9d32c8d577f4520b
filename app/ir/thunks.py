"""The GPU launch order, from XLA:GPU's `thunk_sequence.txt`.

One line per thunk, in the order the compiled program runs them:

    001: kCustomKernel [source | next=002 (1)] gemm_fusion_dot grid: [128, 1, 1]
         threads: [64, 1, 1]  shared_memory: 4096 bytes        (one line in the file)
    002: kAllReduce    [prev=001 (1) | sink  ] kAllReduce

A kernel names itself and its launch (blocks in the grid, threads per block, shared
memory); a library call (cuBLAS, a collective) names only its kind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(
    r"^(?P<order>\d{1,12}):\s+(?P<kind>\w+)\s+\[(?P<links>[^\]]*)\]\s+(?P<name>\S+)"
    r"(?:\s+grid:\s*\[(?P<grid>[^\]]*)\]\s+threads:\s*\[(?P<threads>[^\]]*)\])?"
    r"(?:\s+shared_memory:\s*(?P<shared>\d{1,18}) bytes)?"
)
_KINDS = {
    "kKernel": "kernel",
    "kCustomKernel": "custom kernel",
    "kGemm": "cuBLAS GEMM",
    "kCublasLtMatmul": "cuBLASLt matmul",
    "kCopy": "copy",
    "kCustomCall": "custom call",
    "kConvolution": "cuDNN convolution",
    "kCuDnn": "cuDNN",
    "kMemset32BitValue": "memset",
    "kMemzero": "memset to zero",
}


@dataclass(frozen=True)
class Thunk:
    """One step of the launch order."""

    order: int
    kind: str
    """The thunk kind as XLA names it (kCustomKernel, kAllReduce, …)."""
    what: str
    """The kind in words: "kernel", "cuBLASLt matmul", "all-reduce"."""
    kernel: str | None
    """The kernel it launches, when it launches one of XLA's own."""
    grid: str | None
    """Blocks in the launch grid, e.g. "4096 × 1 × 1"."""
    threads: str | None
    """Threads per block."""
    shared_bytes: int | None


def _words(kind: str) -> str:
    if kind in _KINDS:
        return _KINDS[kind]
    # kAllReduceStart → "all-reduce start": XLA's collectives, named as the HLO names them.
    parts = re.findall(r"[A-Z][a-z0-9]*", kind.removeprefix("k"))
    text = " ".join(p.lower() for p in parts)
    for op in ("all reduce", "all gather", "reduce scatter", "all to all", "collective permute"):
        text = text.replace(op, op.replace(" ", "-"))
    return text or kind


def _dims(text: str | None) -> str | None:
    if text is None:
        return None
    return " × ".join(part.strip() for part in text.split(",") if part.strip())


def thunk_sequence(text: str) -> list[Thunk]:
    """Every thunk in `text`, in launch order (lines that are no thunk are skipped)."""
    out: list[Thunk] = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        kind, name = m.group("kind"), m.group("name")
        out.append(
            Thunk(
                order=int(m.group("order")),
                kind=kind,
                what=_words(kind),
                kernel=None if name == kind else name,
                grid=_dims(m.group("grid")),
                threads=_dims(m.group("threads")),
                shared_bytes=int(m.group("shared")) if m.group("shared") else None,
            )
        )
    return out
