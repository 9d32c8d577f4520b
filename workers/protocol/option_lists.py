"""The XLA options a job may set, per compiler: name, type, bounds and what each changes.

Checked on jax/jaxlib 0.10.2 and libtpu 0.0.42.1 (a deviceless compile per compiler,
every option at its extreme values, none harming the process): every option here changes
what is compiled, none names a file or a folder, writes a dump, or outlives its compile.
libtpu ships no help text: the meanings of its flags are read from their names and from
what they did to the HLO, and say so on the page. `tests/workers/test_compiler_options.py`
compiles each list again, so a newer libtpu that drops or renames a flag is caught.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

Kind = Literal["bool", "int", "enum", "switch"]
"""`switch` is libtpu's three-way flag: auto, true or false."""


class Compiler(StrEnum):
    """The compiler a JAX path compiles with (a target compiles with its path's)."""

    XLA_CPU = "XLA:CPU"
    XLA_GPU = "XLA:GPU"
    LIBTPU = "libtpu"


@dataclass(frozen=True)
class OptionSpec:
    """One allowed option: its type, its bounds or choices, and what it changes."""

    name: str
    kind: Kind
    meaning: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()

    def describe_type(self) -> str:
        """The values this option takes, in words."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "switch":
            return "auto, true or false"
        if self.kind == "enum":
            return "one of " + ", ".join(self.choices)
        return f"a whole number from {self.minimum:,} to {self.maximum:,}"


def _flag(name: str, meaning: str) -> OptionSpec:
    return OptionSpec(name, "bool", meaning)


def _whole(name: str, meaning: str, low: int, high: int) -> OptionSpec:
    return OptionSpec(name, "int", meaning, low, high)


def _one_of(name: str, meaning: str, *choices: str) -> OptionSpec:
    return OptionSpec(name, "enum", meaning, choices=choices)


def _switch(name: str, meaning: str) -> OptionSpec:
    return OptionSpec(name, "switch", meaning)


_GIB = 2**30
_COLLECTIVE_MATMUL = ("DEFAULT", "NONE", "POST_SPMD", "PRE_SPMD", "POST_SPMD_CONSERVATIVE")
_EXCESS = _flag("xla_allow_excess_precision", "let XLA keep bfloat16/half intermediates in float32")

_CPU = (
    _flag(
        "xla_cpu_enable_fast_math",
        "let LLVM reorder and approximate floating-point math in generated code",
    ),
    _flag("xla_cpu_fast_math_honor_nans", "with fast math: still keep NaNs"),
    _flag("xla_cpu_fast_math_honor_infs", "with fast math: still keep infinities"),
    _flag(
        "xla_cpu_fast_math_honor_division",
        "with fast math: divide exactly instead of multiplying by a reciprocal",
    ),
    _flag("xla_cpu_fast_math_honor_functions", "with fast math: keep exact exp, log and the like"),
    _flag("xla_cpu_enable_fast_min_max", "min and max that need not propagate NaN"),
    _flag("xla_cpu_use_xnnpack", "let XNNPACK run the operations it supports"),
    _flag("xla_cpu_use_fusion_emitters", "generate fused loops with XLA's MLIR fusion emitters"),
    _one_of(
        "xla_cpu_scheduler_type",
        "the order in which instructions run",
        "CPU_SCHEDULER_TYPE_DEFAULT",
        "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
        "CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED",
    ),
    _one_of(
        "xla_cpu_opt_preset",
        "a preset trading compile time for run time",
        "CPU_OPT_PRESET_DEFAULT",
        "CPU_OPT_PRESET_FAST_RUNTIME",
        "CPU_OPT_PRESET_FAST_COMPILE",
    ),
    _one_of(
        "xla_cpu_prefer_vector_width", "SIMD width LLVM aims for, in bits", "128", "256", "512"
    ),
    _flag(
        "xla_cpu_strict_dot_conv_math", "dots and convolutions in exactly their declared precision"
    ),
    _whole(
        "xla_backend_optimization_level",
        "how hard the backend (LLVM) optimizes the generated code",
        0,
        3,
    ),
    _EXCESS,
)

_GPU = (
    _flag("xla_gpu_enable_triton_gemm", "generate GEMMs with Triton; false hands them to cuBLAS"),
    _flag("xla_gpu_enable_cublaslt", "call cuBLASLt rather than cuBLAS for GEMMs"),
    _flag("xla_gpu_cublas_fallback", "let the autotuner fall back to cuBLAS when it beats Triton"),
    _flag(
        "xla_gpu_triton_gemm_any",
        "use Triton for any GEMM it can, not only where it is known to help",
    ),
    _whole(
        "xla_gpu_autotune_level",
        "0 skips GEMM autotuning, 4 (the default) autotunes and checks results; it acts only "
        "with a real GPU",
        0,
        4,
    ),
    _flag("xla_gpu_exhaustive_tiling_search", "search every GEMM tiling rather than a short list"),
    _flag(
        "xla_gpu_enable_latency_hiding_scheduler", "schedule to overlap collectives with compute"
    ),
    _whole(
        "xla_gpu_all_reduce_combine_threshold_bytes",
        "combine all-reduces up to this many bytes",
        0,
        16 * _GIB,
    ),
    _whole(
        "xla_gpu_all_gather_combine_threshold_bytes",
        "combine all-gathers up to this many bytes",
        0,
        16 * _GIB,
    ),
    _whole(
        "xla_gpu_reduce_scatter_combine_threshold_bytes",
        "combine reduce-scatters up to this many bytes",
        0,
        16 * _GIB,
    ),
    _flag(
        "xla_gpu_enable_pipelined_all_reduce", "move all-reduces of a loop into the next iteration"
    ),
    _flag(
        "xla_gpu_enable_pipelined_all_gather",
        "move all-gathers of a loop into the previous iteration",
    ),
    _flag(
        "xla_gpu_enable_pipelined_reduce_scatter",
        "move reduce-scatters of a loop into the next iteration",
    ),
    _flag(
        "xla_gpu_enable_while_loop_double_buffering", "unroll loops by two to overlap their steps"
    ),
    _whole(
        "xla_gpu_threshold_for_windowed_einsum_mib",
        "decompose a sharded dot beside a collective into a windowed loop above this size",
        0,
        1 << 20,
    ),
    _flag("xla_gpu_multi_streamed_windowed_einsum", "run windowed-einsum steps on several streams"),
    _flag(
        "xla_gpu_enable_dynamic_slice_fusion",
        "fuse dynamic slices into the library calls that use them",
    ),
    _flag("xla_gpu_deterministic_ops", "only deterministic kernels"),
    _flag("xla_gpu_exclude_nondeterministic_ops", "refuse operations with no deterministic kernel"),
    _flag("xla_gpu_enable_fast_min_max", "min and max that need not propagate NaN"),
    _flag("xla_gpu_ftz", "flush denormal floats to zero"),
    _whole(
        "xla_gpu_gemm_rewrite_size_threshold",
        "GEMMs smaller than this many elements stay plain fusions",
        0,
        2**31 - 1,
    ),
    _EXCESS,
)

_TPU = (
    _flag(
        "xla_tpu_enable_latency_hiding_scheduler",
        "schedule to overlap collectives and copies with compute",
    ),
    _whole(
        "xla_latency_hiding_scheduler_rerun", "extra passes of the latency-hiding scheduler", 0, 4
    ),
    _one_of(
        "xla_tpu_all_gather_collective_matmul_mode",
        "turn an all-gather feeding a matmul into a loop of collective permutes overlapped "
        "with partial matmuls",
        *_COLLECTIVE_MATMUL,
    ),
    _one_of(
        "xla_tpu_reduce_scatter_collective_matmul_mode",
        "the same for a matmul feeding a reduce-scatter",
        *_COLLECTIVE_MATMUL,
    ),
    _whole(
        "xla_jf_spmd_threshold_for_windowed_einsum_mib",
        "windowed einsum for sharded dots above this size",
        0,
        1 << 20,
    ),
    _flag(
        "xla_tpu_enable_windowed_einsum_for_all_gather",
        "windowed einsum for dots fed by an all-gather",
    ),
    _flag(
        "xla_tpu_enable_windowed_einsum_for_reduce_scatter",
        "windowed einsum for dots feeding a reduce-scatter",
    ),
    _flag("xla_tpu_enable_async_collective_fusion", "run collectives as asynchronous fusions"),
    _switch(
        "xla_tpu_enable_async_collective_fusion_fuse_all_gather",
        "fuse all-gathers into asynchronous collective fusions",
    ),
    _flag(
        "xla_tpu_enable_async_collective_fusion_multiple_steps",
        "let an asynchronous collective span several steps",
    ),
    _flag(
        "xla_tpu_overlap_compute_collective_tc",
        "overlap collectives with compute on the TensorCore",
    ),
    _switch("xla_enable_async_all_gather", "start all-gathers asynchronously"),
    _switch("xla_enable_async_collective_permute", "start collective permutes asynchronously"),
    _flag(
        "xla_tpu_enable_data_parallel_all_reduce_opt",
        "overlap data-parallel all-reduces with the backward pass",
    ),
    _flag(
        "xla_tpu_data_parallel_opt_different_sized_ops",
        "the same for all-reduces of different sizes",
    ),
    _flag(
        "xla_tpu_enable_all_reduce_scatter_fusion",
        "fuse an all-reduce with the slice after it into a reduce-scatter",
    ),
    _flag(
        "xla_tpu_prefer_async_allgather_to_allreduce",
        "prefer an asynchronous all-gather over an all-reduce",
    ),
    # Below 1,024 KiB libtpu refuses cleanly (RESOURCE_EXHAUSTED: scoped VMEM).
    _whole(
        "xla_tpu_scoped_vmem_limit_kib",
        "VMEM each kernel may use for scratch, in KiB (too little fails to compile)",
        1024,
        131072,
    ),
    _flag("xla_tpu_rwb_fusion", "fuse reduce-window-broadcast patterns"),
    _flag("xla_tpu_dot_dot_fusion", "fuse a dot into the dot that consumes it"),
    _flag(
        "xla_tpu_enable_dot_strength_reduction", "rewrite small dots as multiplies and reductions"
    ),
    _switch("xla_msa_enable", "memory-space assignment: prefetch into VMEM ahead of use"),
    # The search schedulers (ilp, brkga, backtracking, brute_force) are left out: their
    # compile time has no bound.
    _one_of(
        "xla_memory_scheduler",
        "the order that keeps peak memory down",
        "default",
        "list",
        "dfs",
        "post_order",
        "bfs",
    ),
)

ALLOWED: dict[Compiler, dict[str, OptionSpec]] = {
    compiler: {spec.name: spec for spec in specs}
    for compiler, specs in (
        (Compiler.XLA_CPU, _CPU),
        (Compiler.XLA_GPU, _GPU),
        (Compiler.LIBTPU, _TPU),
    )
}
"""Every option a job may set, per compiler; nothing else is passed on."""
