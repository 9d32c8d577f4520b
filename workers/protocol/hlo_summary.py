"""Summaries of optimized HLO text: what XLA chose to run. Pure text parsing, no jax.

The optimized HLO printed by a Compiled stage lists computations, each a block of
instructions `%name = shape opcode(operands), attributes`. The summary reports the
fusions (and the library behind each custom fusion), custom calls and their targets,
collectives with their payload sizes, and counts of copies, transposes and top-level
instructions, so a reader can see, for example, that a chain of eight elementwise
operations became one kernel, or that a dot went to cuBLAS on a GPU and YNNPACK on a CPU.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

from workers.protocol import CostAnalysis, HloCollective, HloCustomCall, HloFusion, HloSummary
from workers.protocol.hlo import (
    IOTA_GROUPS,
    MESH_AXIS,
    MESH_GROUPS,
    HloModule,
    Instruction,
    payload_shape,
    read_hlo,
    shape_bytes,
)

COLLECTIVES = frozenset(
    {
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "collective-broadcast",
        "ragged-all-to-all",
    }
)
"""Communication opcodes; their asynchronous `-start` forms count once, `-done` not at all."""

_PLUMBING = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
"""Opcodes that move no data worth listing among a fusion's operations."""

# Markers in custom-call targets and custom fusion kinds, and the library each names.
_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("__cublas$lt", "cuBLASLt"),
    ("__cublas", "cuBLAS"),
    ("__cudnn", "cuDNN"),
    ("__triton", "Triton"),
    ("__ynn", "YNNPACK"),
    ("__xnn", "XNNPACK"),
    ("onednn", "oneDNN"),
    ("tpu_custom_call", "Mosaic TPU"),
    ("mosaic_gpu", "Mosaic GPU"),
    ("cusolver", "cuSOLVER"),
    ("cufft", "cuFFT"),
    ("lapack", "LAPACK"),
    ("ducc", "DUCC FFT"),
)


def library_of(target: str) -> str | None:
    """The library a custom-call target or custom fusion kind belongs to, if known."""
    lowered = target.lower()
    for marker, library in _LIBRARIES:
        if marker.lower() in lowered:
            return library
    return None


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_replica_groups(text: str) -> list[list[int]] | None:
    """Device-id groups from any of HLO's replica-group spellings; None if unknown.

    Explicit `{{0,1},{2,3}}`; iota `[G,S]<=[N]` or `[G,S]<=[A,B]T(1,0)` (device ids laid
    out in the reshape dimensions, transposed, then cut into G groups of S); and the
    mesh form `mesh['axis_0'=2,'axis_1'=4] {'axis_1'}`, whose groups vary the named axes
    of a row-major mesh of device ids. `{}` (one group of every device) gives None.
    """
    text = text.strip()
    if text.startswith("{{"):
        return [_ints(group) for group in re.findall(r"\{([\d,\s]*)\}", text[1:-1])]
    iota = IOTA_GROUPS.match(text)
    if iota is not None:
        shape, dims = _ints(iota[1]), _ints(iota[2])
        order = _ints(iota[3]) if iota[3] else list(range(len(dims)))
        ids = _transposed_iota(dims, order)
        size = shape[-1] if shape else 1
        return [ids[i : i + size] for i in range(0, len(ids), size)]
    mesh = MESH_GROUPS.match(text)
    if mesh is not None:
        axes: list[tuple[str, int]] = []
        for part in mesh[1].split(","):
            found = MESH_AXIS.match(part.strip())
            if found is None:
                return None  # sub-axes and other refinements are left as text
            axes.append((found[1], int(found[2])))
        chosen = [name.strip().strip("'") for name in mesh[2].split(",") if name.strip()]
        names = [name for name, _ in axes]
        if any(name not in names for name in chosen):
            return None
        return _mesh_groups(axes, chosen)
    return None


def _transposed_iota(dims: list[int], order: list[int]) -> list[int]:
    """Row-major ids over `dims`, read back in the axis order `order`."""
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    out_dims = [dims[i] for i in order]
    ids: list[int] = []
    for coords in itertools.product(*(range(d) for d in out_dims)):
        ids.append(sum(c * strides[axis] for c, axis in zip(coords, order, strict=True)))
    return ids


def _mesh_groups(axes: list[tuple[str, int]], chosen: list[str]) -> list[list[int]]:
    """Groups of a row-major mesh of device ids that vary exactly the `chosen` axes."""
    names = [name for name, _ in axes]
    sizes = dict(axes)
    strides: dict[str, int] = {}
    stride = 1
    for name, size in reversed(axes):
        strides[name] = stride
        stride *= size
    fixed = [name for name in names if name not in chosen]
    groups: list[list[int]] = []
    for outer in itertools.product(*(range(sizes[n]) for n in fixed)):
        base = sum(c * strides[n] for c, n in zip(outer, fixed, strict=True))
        inner = itertools.product(*(range(sizes[n]) for n in chosen))
        groups.append(
            [base + sum(c * strides[n] for c, n in zip(at, chosen, strict=True)) for at in inner]
        )
    return groups


def jax_op_name(op_name: str | None) -> str | None:
    """The JAX operation an instruction came from, as its op_name metadata says it:
    "jit(step)/dot_general" → "dot_general"; argument names ("a") stay as they are."""
    if not op_name:
        return None
    return op_name.split(")/", 1)[1] if op_name.startswith("jit(") and ")/" in op_name else op_name


def collective_of(ins: Instruction) -> HloCollective:
    """The HloCollective an instruction (a collective or its -start form) describes."""
    groups_text = ins.attribute("replica_groups")
    dims = ins.attribute("dimensions")
    payload = payload_shape(ins.opcode, ins.shape)
    return HloCollective(
        kind=ins.opcode.removesuffix("-start"),
        shape=payload,
        bytes=shape_bytes(payload),
        replica_groups=groups_text,
        groups=parse_replica_groups(groups_text) if groups_text else None,
        name=ins.name,
        jax_op=jax_op_name(ins.op_name),
        dimensions=_ints(dims.strip("{}")) if dims is not None else None,
        asynchronous=ins.opcode.endswith("-start"),
    )


def summarize_hlo(text: str, *, cut: bool = False) -> HloSummary:
    """Summarize optimized HLO text (as printed by `Compiled.as_text()`)."""
    return summarize(read_hlo(text, cut=cut))


def summarize(module: HloModule) -> HloSummary:
    """What XLA chose to run in `module`: its fusions, library calls and collectives."""
    fused: set[str] = set()
    helpers: set[str] = set()
    for ins in module.instructions():
        if ins.opcode == "fusion":
            fused.update(ins.called)
        applied = ins.attribute("to_apply")
        if applied is not None:
            helpers.add(applied.lstrip("%"))
    summary = HloSummary()
    op_counts: Counter[str] = Counter()
    for computation in module.computations:
        top_level = computation.name not in fused and computation.name not in helpers
        for ins in computation.instructions:
            if top_level:
                op_counts[ins.opcode] += 1
            _count(summary, module, ins)
    libraries: list[str] = []
    for found in [f.library for f in summary.fusions] + [c.library for c in summary.custom_calls]:
        if found is not None and found not in libraries:
            libraries.append(found)
    summary.op_counts = dict(op_counts.most_common())
    summary.instructions = sum(op_counts.values())
    summary.libraries = libraries
    return summary


def _count(summary: HloSummary, module: HloModule, ins: Instruction) -> None:
    """Add `ins` to the summary's copies, transposes, fusions, calls or collectives."""
    if ins.opcode in {"copy", "copy-start"}:
        summary.copies += 1
    elif ins.opcode == "transpose":
        summary.transposes += 1
    elif ins.opcode == "fusion":
        summary.fusions.append(_fusion(ins, module))
    elif ins.opcode == "custom-call":
        target = ins.custom_call_target or "unknown"
        summary.custom_calls.append(
            HloCustomCall(target=target, library=library_of(target), shape=ins.shape)
        )
    elif ins.opcode in COLLECTIVES or ins.opcode.removesuffix("-start") in COLLECTIVES:
        summary.collectives.append(collective_of(ins))


def _fusion(ins: Instruction, module: HloModule) -> HloFusion:
    backend_kind = ins.backend_kind
    named = (ins.attribute("calls") or "").strip("{}").split(",")
    calls = [c.strip().lstrip("%") for c in named if c.strip()]
    ops: list[str] = []
    for name in calls:
        body = module.computations_by_name.get(name)
        for inner in body.instructions if body else ():
            if inner.opcode not in _PLUMBING and inner.opcode not in ops:
                ops.append(inner.opcode)
    return HloFusion(
        name=ins.name,
        kind=ins.fusion_kind or "unknown",
        calls=calls,
        backend_kind=backend_kind,
        library=library_of(backend_kind) if backend_kind else None,
        ops=ops,
    )


def compiled_costs(compiled: Any) -> CostAnalysis | None:
    """The FLOPs and bytes XLA counted for a compiled program, or None where the backend
    counts none (XLA:GPU). Only those two: a TPU's `optimal_seconds` is the compiler's
    model, which must never read as a time."""
    try:
        raw = compiled.cost_analysis()
    except (NotImplementedError, RuntimeError, ValueError):
        return None
    if isinstance(raw, list):  # older jax returned one dict per program
        raw = raw[0] if raw else None
    if not isinstance(raw, dict):
        return None

    def pick(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if isinstance(value, int | float) and value >= 0 else None

    return CostAnalysis(flops=pick("flops"), bytes_accessed=pick("bytes accessed"))


GEMM_LIBRARIES = frozenset({"Triton", "cuBLAS", "cuBLASLt", "cuDNN"})
"""Libraries whose GEMMs XLA:GPU's autotuner configures by timing candidates on the GPU."""


def autotuned_gemms(summary: HloSummary) -> list[str]:
    """XLA's own GEMMs in optimized GPU HLO, each as "name (library)": a library fusion with
    a dot in it (a Triton GEMM fusion, a cuDNN one) or a cuBLAS call. A Pallas kernel's
    custom call (`__gpu$xla.gpu.triton`) is its author's code, not one of them."""
    found = [
        f"{f.name} ({f.library})"
        for f in summary.fusions
        if f.library in GEMM_LIBRARIES and "dot" in f.ops
    ]
    found += [
        f"{c.target} ({c.library})"
        for c in summary.custom_calls
        if c.library in {"cuBLAS", "cuBLASLt"}
    ]
    return found
