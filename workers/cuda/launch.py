"""The execute stage of the cuda path, through CuPy. Imported only when a GPU run happens.

Why CuPy: one maintained package loads our cubin (`RawModule`), launches kernels on a
stream, records CUDA events, and calls cuBLAS (`cublasGemmEx`) for the library baseline;
it is on the GPU image. cuda-python's bindings have no cuBLAS.

Every subject (our kernel, cuBLAS, JAX) is timed after its inputs are placed and a
warm-up has run, under two boundaries, each in its own loop:
- `device-events`: a start and a stop event, created once before sampling, recorded in
  the same stream around the launches; the stop event is synchronized and the interval
  read from the event API. JAX runs on its own streams, so it has no such interval.
- `host-sync` (`host-throughput` in throughput mode): the host clock from the launch to
  the end of a stream synchronize.
A launch or execution error raises KernelFailed: a failed kernel yields an error, never
a timing. Each subject's output is checked against the float64 reference, computed once
(`Workload.checker`: by projections for a large product).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workers.catalog.base import WorkloadParams
from workers.catalog.matmul import MatmulParams
from workers.cuda.env import cublas_module
from workers.cuda.plan import KernelPlan
from workers.measure.harness import ProgressSink, ProgressTicker
from workers.measure.stopping import Stopper, measurement
from workers.protocol import (
    BoundaryId,
    Correctness,
    Measurement,
    MeasureOptions,
    Mode,
    cuda_host_boundary,
)
from workers.protocol.speeds import CUBLAS_SUBJECT, JAX_SUBJECT, KERNEL_SUBJECT
from workers.workloads import Check, HostArray, Workload

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0
_CUBLAS_TYPES = {"float32": CUDA_R_32F, "float16": CUDA_R_16F, "bfloat16": CUDA_R_16BF}

KERNEL, CUBLAS, JAX = KERNEL_SUBJECT, CUBLAS_SUBJECT, JAX_SUBJECT


class KernelFailed(RuntimeError):
    """A launch or its execution failed; the run reports the error and no timing."""


@dataclass
class Subject:
    """One implementation of the workload, timed and checked."""

    name: str
    note: str
    measurements: list[Measurement] = field(default_factory=list)
    correctness: Correctness | None = None
    warm_up_s: float | None = None


@dataclass
class Executed:
    """What the execute stage produced for every subject; the kernel comes first."""

    subjects: list[Subject]
    warnings: list[str]
    untimed_s: float


def _device_dtype(np_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype CuPy holds a storage type as: bfloat16 travels as its 16 raw bits."""
    return np.dtype(np.uint16) if np_dtype.name == "bfloat16" else np_dtype


def _to_device(cp: Any, host: HostArray) -> Any:
    if host.dtype.name == "bfloat16":
        return cp.asarray(host.view(np.uint16))
    return cp.asarray(host)


def _to_host(array: Any, storage: np.dtype[Any]) -> HostArray:
    host: HostArray = array.get()
    return host.view(storage) if storage.name == "bfloat16" else host


class L2Flusher:
    """Writes a buffer twice the L2's size before a sample, so no input stays cached
    (what nvbench's cold measurements do). Runs outside every timed interval."""

    def __init__(self, cp: Any, l2_bytes: int, stream: Any) -> None:
        self.size = max(2 * l2_bytes, 1 << 20)
        self.buffer = cp.empty(self.size, dtype=cp.uint8)
        self.stream = stream
        self.memset = cp.cuda.runtime.memsetAsync

    def __call__(self) -> None:
        self.memset(self.buffer.data.ptr, 0, self.size, self.stream.ptr)
        self.stream.synchronize()


def _errors(cp: Any) -> tuple[type[BaseException], ...]:
    return (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError)


@dataclass
class Sampler:
    """Times subjects on one CuPy stream under one set of measure options."""

    cp: Any
    stream: Any
    options: MeasureOptions
    flush: Callable[[], None] | None

    def loops(self, run: Callable[[], None], progress: ProgressSink | None) -> list[Measurement]:
        """The device-events loop, then the host loop, for one subject."""
        cp, stream, options, flush = self.cp, self.stream, self.options, self.flush
        clock = time.perf_counter
        calls = options.calls_per_sample if options.mode is Mode.THROUGHPUT else 1
        start, stop = cp.cuda.Event(), cp.cuda.Event()  # created outside every interval
        elapsed_ms = cp.cuda.get_elapsed_time
        samples: list[float] = []
        stopper = Stopper(options, clock())
        ticker = ProgressTicker(progress, stopper, clock())
        while True:
            if flush is not None:
                flush()
            start.record(stream)
            for _ in range(calls):
                run()
            stop.record(stream)
            stop.synchronize()
            samples.append(elapsed_ms(start, stop) / 1e3 / calls)
            now = clock()
            if stopper.done(samples, now):
                break
            ticker.tick(len(samples), now)
        ticker.finish(len(samples))
        found = [measurement(BoundaryId.DEVICE_EVENTS, samples, stopper, calls)]
        boundary = cuda_host_boundary(options)  # the one map the server checks against
        host: list[float] = []
        stopper = Stopper(options, clock())
        synchronize = stream.synchronize
        while True:
            if flush is not None:
                flush()
            t0 = clock()
            for _ in range(calls):
                run()
            synchronize()
            t1 = clock()
            host.append((t1 - t0) / calls)
            if stopper.done(host, t1):
                break
        found.append(measurement(boundary, host, stopper, calls))
        return found

    def timed(
        self, subject: Subject, run: Callable[[], None], progress: ProgressSink | None = None
    ) -> None:
        """Warm up and sample `subject`; KernelFailed on any CUDA error."""
        try:
            t0 = time.perf_counter()
            for _ in range(self.options.warmup):
                run()
                self.stream.synchronize()  # an execution error surfaces here, before sampling
            subject.warm_up_s = time.perf_counter() - t0
            subject.measurements = self.loops(run, progress)
        except _errors(self.cp) as exc:
            raise KernelFailed(f"{subject.name}: launch or execution failed: {exc}") from None
        for m in subject.measurements:
            m.subject = subject.name
            m.note = subject.note


def _kernel_runner(cp: Any, plan: KernelPlan, cubin: str, buffers: dict[str, Any]) -> Any:
    module = cp.RawModule(path=cubin)
    functions = {name: module.get_function(name) for name in plan.kernels()}
    launches = []
    for launch in plan.launches:
        args = tuple(
            buffers[arg]
            if isinstance(arg, str)
            else (np.int32 if arg[0] == "i32" else np.int64)(arg[1])
            for arg in launch.args
        )
        launches.append((functions[launch.kernel], launch.grid, launch.block, args))

    def run() -> None:
        for function, grid, block, args in launches:
            function(grid, block, args)

    return run


def _cublas_runner(cp: Any, p: MatmulParams, buffers: dict[str, Any], out: Any) -> Any:
    """C = A·B through cublasGemmEx with float32 compute. cuBLAS is column-major, so the
    row-major product is computed as Cᵀ = Bᵀ·Aᵀ, which reads the same memory."""
    cublas = cublas_module()
    handle = cp.cuda.device.get_cublas_handle()
    kind = _CUBLAS_TYPES[p.dtype.value]
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)  # host scalars, kept alive
    a, b = buffers["a"], buffers["b"]

    def run() -> None:
        cublas.gemmEx(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, p.n, p.m, p.k,
            one.ctypes.data, b.data.ptr, kind, p.n, a.data.ptr, kind, p.k,
            zero.ctypes.data, out.data.ptr, kind, p.n,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip

    return run


def _jax_subject(
    workload: Workload[Any],
    params: WorkloadParams,
    host_inputs: Sequence[HostArray],
    check: Check,
    options: MeasureOptions,
) -> tuple[Subject | None, str | None]:
    """The same workload through JAX on this GPU, timed like the jax-gpu path (host-sync)."""
    import jax

    from workers.compiler.jaxtyped import shape_dtype_struct
    from workers.measure import harness

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        return None, "JAX baseline skipped: this process's JAX sees no GPU"
    subject = Subject(
        JAX,
        "jax.jit of the same workload on this GPU; JAX runs on its own streams, so only "
        "host-side boundaries apply",
    )
    sharding = jax.sharding.SingleDeviceSharding(gpus[0])
    abstract = [shape_dtype_struct(h.shape, h.dtype, sharding=sharding) for h in host_inputs]
    compiled = jax.jit(workload.function(params)).lower(*abstract).compile()
    args = harness.block_all(jax.device_put(list(host_inputs), gpus[0]))
    t0 = time.perf_counter()
    harness.warm_up(compiled, args, options.warmup)
    subject.warm_up_s = time.perf_counter() - t0
    # Under the host boundary the kernel's host loop uses (K = 1 is host-sync).
    if cuda_host_boundary(options) is BoundaryId.HOST_THROUGHPUT:
        sampled = harness.sample_throughput(compiled, args, options)
    else:
        sampled = harness.sample_latency(compiled, args, options)
    subject.measurements = sampled.measurements
    for m in subject.measurements:
        m.subject, m.note = subject.name, subject.note
    subject.correctness = check(np.asarray(sampled.output))
    return subject, None


def execute(
    plan: KernelPlan,
    *,
    cubin: str,
    workload: Workload[Any],
    params: WorkloadParams,
    host_inputs: Sequence[HostArray],
    options: MeasureOptions,
    l2_bytes: int | None,
    progress: ProgressSink | None = None,
) -> Executed:
    """Run `plan` (kernels from `cubin`) and its baselines; time, check, return them."""
    import cupy as cp

    started = time.perf_counter()
    storage = np.dtype(host_inputs[0].dtype)
    buffers = {name: _to_device(cp, h) for name, h in zip(plan.inputs, host_inputs, strict=True)}
    buffers["out"] = cp.zeros(plan.output_shape, dtype=_device_dtype(storage))
    stream = cp.cuda.Stream(non_blocking=True)
    warnings: list[str] = []
    flush = None
    if options.flush_l2:
        flush = L2Flusher(cp, l2_bytes or 0, stream)
        warnings.append(
            f"L2 flushed before every sample ({flush.size:,} bytes written outside the "
            "intervals): cold-cache timings."
        )
    sampler = Sampler(cp, stream, options, flush)
    check = workload.checker(params, host_inputs)
    kernel = Subject(KERNEL, f"{plan.kernel}: {plan.description}")
    subjects = [kernel]
    timed = 0.0
    with stream:
        try:
            run = _kernel_runner(cp, plan, cubin, buffers)
        except _errors(cp) as exc:
            raise KernelFailed(f"{plan.kernel}: could not load the cubin: {exc}") from None
        sampler.timed(kernel, run, progress)
        output = _to_host(buffers["out"], storage)
        kernel.correctness = check(output)
        if isinstance(params, MatmulParams):
            out = cp.zeros(plan.output_shape, dtype=_device_dtype(storage))
            cublas = Subject(
                CUBLAS,
                f"cublasGemmEx, {params.dtype.value} storage, float32 compute "
                "(CUBLAS_COMPUTE_32F): the optimized library",
            )
            sampler.timed(cublas, _cublas_runner(cp, params, buffers, out))
            cublas.correctness = check(_to_host(out, storage))
            subjects.append(cublas)
    for subject in subjects:
        for m in subject.measurements:
            timed += sum(m.samples_s) * m.calls_per_sample
    jax_subject, skipped = _jax_subject(workload, params, host_inputs, check, options)
    if jax_subject is not None:
        subjects.append(jax_subject)
        timed += sum(sum(m.samples_s) * m.calls_per_sample for m in jax_subject.measurements)
    if skipped:
        warnings.append(skipped)
    if flush is not None and jax_subject is not None:
        warnings.append("JAX baseline: the L2 flush applies to CuPy's stream only, not to JAX.")
    warm = sum(s.warm_up_s or 0.0 for s in subjects)
    return Executed(subjects, warnings, max(0.0, time.perf_counter() - started - timed - warm))
