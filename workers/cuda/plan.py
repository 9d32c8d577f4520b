"""Which kernel serves a workload's parameters, and how it is launched.

A plan names the source file in `kernels/`, the kernel the job chose, and the exact
launches (grid, block, arguments) that compute the output. It is pure data: the compile
stage reads it to pick the kernel whose PTX and SASS to show, and `launch` turns it into
CuPy calls. The block sizes here must match the constants at the top of each `.cu` file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workers.catalog.base import Dtype, WorkloadParams
from workers.catalog.elementwise import ElementwiseKernel, ElementwiseParams
from workers.catalog.matmul import MatmulKernel, MatmulParams
from workers.catalog.reduction import ReductionKernel, ReductionOp, ReductionParams

SUFFIX: dict[Dtype, str] = {Dtype.FLOAT32: "f32", Dtype.BFLOAT16: "bf16", Dtype.FLOAT16: "f16"}
"""The storage type each exported kernel name ends with."""

SOURCES: tuple[str, ...] = ("matmul.cu", "elementwise.cu", "reduction.cu")
"""Every kernel source the build script compiles."""

ELEMENTWISE_THREADS = 256
ELEMENTWISE_MAX_BLOCKS = 1 << 16  # the grid-stride loop covers the rest
REDUCTION_THREADS = 256

Scalar = tuple[Literal["i32", "i64"], int]
"""A scalar kernel argument: its C type and value."""

Arg = str | Scalar
"""A kernel argument: the name of a buffer ('a', 'b', 'x', 'out') or a scalar."""

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class Launch:
    """One kernel launch: which exported kernel, its grid and block, its arguments."""

    kernel: str
    grid: Dim3
    block: Dim3
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class KernelPlan:
    """The kernel a job runs and the launches that compute its output, in stream order."""

    workload: str
    source: str
    kernel: str
    launches: tuple[Launch, ...]
    inputs: tuple[str, ...]
    output_shape: tuple[int, ...]
    description: str

    def kernels(self) -> list[str]:
        """Distinct kernel names launched, in first-launch order."""
        seen: list[str] = []
        for launch in self.launches:
            if launch.kernel not in seen:
                seen.append(launch.kernel)
        return seen


class NoKernel(ValueError):
    """The workload has no hand-written kernel."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _matmul(p: MatmulParams) -> KernelPlan:
    name = f"matmul_{p.kernel.value}_{SUFFIX[p.dtype]}"
    args: tuple[Arg, ...] = ("a", "b", "out", ("i32", p.m), ("i32", p.n), ("i32", p.k))
    if p.kernel is MatmulKernel.NAIVE:
        launch = Launch(name, (_ceil(p.n, 16), _ceil(p.m, 16), 1), (16, 16, 1), args)
        what = "one thread per element of C, operands read from global memory"
    else:
        launch = Launch(name, (_ceil(p.n, 32), _ceil(p.m, 32), 1), (32, 8, 1), args)
        what = "32×32 tiles of A and B staged in shared memory, 4 outputs per thread"
    return KernelPlan("matmul", "matmul.cu", name, (launch,), ("a", "b"), (p.m, p.n), what)


def _elementwise(p: ElementwiseParams) -> KernelPlan:
    suffix = SUFFIX[p.dtype]
    grid = (min(_ceil(p.n, ELEMENTWISE_THREADS), ELEMENTWISE_MAX_BLOCKS), 1, 1)
    block = (ELEMENTWISE_THREADS, 1, 1)
    if p.kernel is ElementwiseKernel.FUSED:
        name = f"chain_fused_{suffix}"
        launches: tuple[Launch, ...] = (
            Launch(name, grid, block, ("x", "out", ("i64", p.n), ("i32", p.ops))),
        )
        what = f"one fused kernel applies all {p.ops} operations in registers"
    else:
        name = f"chain_step_{suffix}"
        launches = tuple(
            Launch(name, grid, block, ("x" if op == 0 else "out", "out", ("i64", p.n), ("i32", op)))
            for op in range(p.ops)
        )
        what = f"{p.ops} launches, one per operation, each reading and writing memory"
    return KernelPlan("elementwise", "elementwise.cu", name, launches, ("x",), (p.n,), what)


def _reduction(p: ReductionParams) -> KernelPlan:
    suffix = SUFFIX[p.dtype]
    op = p.op.value
    softmax = p.op is ReductionOp.SOFTMAX
    shape = (p.rows, p.cols) if softmax else ((p.rows,) if p.axis == 1 else (p.cols,))
    dims: tuple[Arg, ...] = ("x", "out", ("i32", p.rows), ("i32", p.cols))
    if p.kernel is ReductionKernel.NAIVE:
        name = f"{op}_naive_{suffix}"
        vectors = p.rows if p.axis == 1 else p.cols
        grid = (_ceil(vectors, REDUCTION_THREADS), 1, 1)
        launch = Launch(name, grid, (REDUCTION_THREADS, 1, 1), (*dims, ("i32", p.axis)))
        what = "one thread walks each whole vector alone"
    elif p.axis == 1:
        name = f"{op}_tree_axis1_{suffix}"
        launch = Launch(name, (p.rows, 1, 1), (REDUCTION_THREADS, 1, 1), dims)
        what = "a block per row; partial results combined with warp shuffles"
    else:
        name = f"{op}_tree_axis0_{suffix}"
        launch = Launch(name, (_ceil(p.cols, 32), 1, 1), (32, 8, 1), dims)
        what = "a 32×8 block per 32 columns; partial results combined in shared memory"
    return KernelPlan("reduction", "reduction.cu", name, (launch,), ("x",), shape, what)


def plan_for(params: WorkloadParams) -> KernelPlan:
    """The kernel plan for validated `params`; NoKernel if the workload has none."""
    if isinstance(params, MatmulParams):
        return _matmul(params)
    if isinstance(params, ElementwiseParams):
        return _elementwise(params)
    if isinstance(params, ReductionParams):
        return _reduction(params)
    raise NoKernel(f"{params.workload} has no hand-written CUDA kernel")


def source_kernels(source: str) -> list[str]:
    """Every kernel name a source file exports (what the build script checks for)."""
    names: list[str] = []
    for suffix in SUFFIX.values():
        if source == "matmul.cu":
            names += [f"matmul_naive_{suffix}", f"matmul_tiled_{suffix}"]
        elif source == "elementwise.cu":
            names += [f"chain_fused_{suffix}", f"chain_step_{suffix}"]
        elif source == "reduction.cu":
            for op in ("sum", "softmax"):
                names += [f"{op}_naive_{suffix}", f"{op}_tree_axis1_{suffix}"]
                names.append(f"{op}_tree_axis0_{suffix}")
        else:
            raise NoKernel(f"no kernel source {source!r} (known: {', '.join(SOURCES)})")
    return names
