"""The wire contract between the server, workers and `boundary run --json`.

Pydantic only, no jax: the server imports this module, so it must stay light.
Names follow DESIGN.md's vocabulary (path, stage, workload, job, run, boundary,
worker). Fields may be added; nothing here is ever renamed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

PROTOCOL_VERSION = 1
"""Bumped when a message changes shape in a way an older peer cannot read."""

MAX_SAMPLES = 5000
"""The most samples one measurement may take (the contract asks for at least 1,000)."""


class StrictModel(BaseModel):
    """A model that rejects unknown fields and never coerces types.

    Enum fields are annotated `Lax` so their string values are accepted from Python
    dicts as well as JSON; nothing else is coerced (`true` or `"8"` is no integer).
    """

    model_config = ConfigDict(extra="forbid", strict=True)


class OpenModel(BaseModel):
    """A model read from a peer that may be newer than us: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


Lax = Strict(False)
"""Marks an enum field that accepts its string values (strict mode wants instances)."""


# --- vocabulary -----------------------------------------------------------------------


class PathId(StrEnum):
    """A programming model on a kind of hardware."""

    JAX_GPU = "jax-gpu"
    JAX_TPU = "jax-tpu"
    CUDA = "cuda"
    JAX_CPU = "jax-cpu"


class StageId(StrEnum):
    """A part of the pipeline the reader highlights and a job can ask for."""

    COMPILE = "compile"
    EXECUTE = "execute"
    SCALE = "scale"


class BoundaryId(StrEnum):
    """What a timing interval encloses. Every sample carries exactly one."""

    LOWER = "lower"
    COMPILE = "compile"
    HOST_SYNC = "host-sync"
    HOST_DISPATCH = "host-dispatch"
    HOST_THROUGHPUT = "host-throughput"
    TRANSFER_IN = "transfer-in"
    TRANSFER_OUT = "transfer-out"
    APPLICATION = "application"
    DEVICE_EVENTS = "device-events"


class Mode(StrEnum):
    """Which call pattern the execute stage samples."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"
    APPLICATION = "application"
    DISPATCH = "dispatch"


class CachePolicy(StrEnum):
    """How compilation caches are treated before the compile stage is timed."""

    COLD = "cold"
    PERSISTENT = "persistent"
    WARM = "warm"


class Platform(StrEnum):
    """A JAX backend platform name."""

    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"


class JobStatus(StrEnum):
    """Where a job is in its life. The last four are final."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


FINAL_STATUSES = frozenset(
    {JobStatus.DONE, JobStatus.FAILED, JobStatus.EXPIRED, JobStatus.CANCELLED}
)

MODE_BOUNDARIES: dict[Mode, tuple[BoundaryId, ...]] = {
    Mode.LATENCY: (BoundaryId.HOST_SYNC,),
    Mode.THROUGHPUT: (BoundaryId.HOST_THROUGHPUT,),
    Mode.APPLICATION: (BoundaryId.TRANSFER_IN, BoundaryId.APPLICATION, BoundaryId.TRANSFER_OUT),
    Mode.DISPATCH: (BoundaryId.HOST_DISPATCH,),
}
"""The boundaries each mode reports, in the order a reader should see them."""

PATH_PLATFORM: dict[PathId, Platform] = {
    PathId.JAX_GPU: Platform.GPU,
    PathId.JAX_TPU: Platform.TPU,
    PathId.CUDA: Platform.GPU,
    PathId.JAX_CPU: Platform.CPU,
}
"""The JAX platform a path needs (the CUDA path needs an NVIDIA GPU to execute)."""


# --- a job: what a user asks for ---------------------------------------------------------


class MeasureOptions(StrictModel):
    """How the execute stage is sampled."""

    mode: Annotated[Mode, Lax] = Mode.LATENCY
    samples: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] | Literal["auto"] = Field(
        default=20,
        description="Exactly this many samples, or 'auto' to stop adaptively.",
    )
    cache: Annotated[CachePolicy, Lax] = CachePolicy.COLD
    calls_per_sample: int = Field(
        default=10, ge=1, le=1000, description="K: calls enqueued per sync in throughput mode."
    )
    max_seconds: float = Field(
        default=30.0, gt=0, le=600, description="Time cap on sampling ('auto' stops here too)."
    )
    auto_max_samples: int = Field(default=1000, ge=5, le=MAX_SAMPLES)
    auto_rel_iqr: float = Field(
        default=0.05, gt=0, le=1, description="'auto' stops once IQR / median falls below this."
    )
    warmup: int = Field(default=1, ge=1, le=100, description="Uncounted calls before sampling.")
    flush_l2: bool = Field(
        default=False,
        description="cuda path: flush the GPU's L2 cache before every sample (cold-cache timing).",
    )
    profile: bool = Field(
        default=False,
        description="Capture a JAX profiler trace of the sampled calls (not compile, not warm-up).",
    )

    def sample_count(self) -> int | None:
        """The fixed sample count, or None when sampling is adaptive."""
        return None if self.samples == "auto" else self.samples


class JobSpec(StrictModel):
    """A request: a workload with its parameters, a target path and measurement options."""

    workload: str = Field(min_length=1, max_length=64)
    path: Annotated[PathId, Lax] = PathId.JAX_CPU
    params: dict[str, Any] = Field(default_factory=dict)
    stages: list[Annotated[StageId, Lax]] = Field(
        default_factory=lambda: [StageId.COMPILE, StageId.EXECUTE], min_length=1, max_length=3
    )
    measure: MeasureOptions = Field(default_factory=MeasureOptions)


# --- a run: what came back --------------------------------------------------------------


class Stats(OpenModel):
    """Sample statistics, named as pytest-benchmark names them. Seconds throughout."""

    min: float
    max: float
    mean: float
    stddev: float
    median: float
    q1: float
    q3: float
    iqr: float
    outliers: str = Field(description="'<stddev outliers>;<IQR outliers>' as pytest-benchmark.")
    rounds: int
    ops: float | None = Field(default=None, description="Calls per second at the mean.")
    wide_spread: bool = Field(default=False, description="IQR / median above the warning level.")


class Measurement(OpenModel):
    """Samples under one timing boundary, with their statistics."""

    boundary: BoundaryId
    samples_s: list[float]
    stats: Stats | None
    calls_per_sample: int = 1
    stopped_because: str | None = None
    note: str | None = None
    subject: str | None = Field(
        default=None,
        description="What was timed when a run times several implementations, e.g. cuBLAS.",
    )


class Correctness(OpenModel):
    """The output checked against a float64 reference."""

    passed: bool
    error: float | None = Field(description="||out - ref|| / ||ref||; None if not finite.")
    tolerance: float
    reference: str = "float64 NumPy"
    detail: str | None = None
    checked: bool = Field(
        default=True,
        description="False when there was nothing to check the output against: `passed` is "
        "then false too, yet the run stays valid and its timings stand (see `detail`).",
    )


class CacheEvents(OpenModel):
    """What the persistent compilation cache reported during the compile stage."""

    hits: int = 0
    misses: int = 0
    time_saved_s: float | None = None


class Environment(OpenModel):
    """Everything needed to say where and how a run happened."""

    platform: str
    device_kind: str
    device_count: int
    jax_version: str
    jaxlib_version: str
    backend_platform_version: str | None = None
    xla_flags: str = ""
    precision: str | None = None
    x64: bool = False
    cache: CachePolicy = CachePolicy.COLD
    cache_events: CacheEvents | None = None
    host_cpu: str | None = None
    python: str | None = None
    hostname: str | None = None
    timestamp: str
    extra: dict[str, str] = Field(
        default_factory=dict, description="Backend-specific facts: driver, CUDA libraries, ..."
    )


class Artifacts(OpenModel):
    """IR text produced by the stages; None when a stage did not produce it."""

    jaxpr: str | None = None
    stablehlo: str | None = None
    hlo: str | None = None
    ptx: str | None = None
    sass: str | None = None


ARTIFACT_NAMES: tuple[str, ...] = ("jaxpr", "stablehlo", "hlo", "ptx", "sass")


class StageSeconds(OpenModel):
    """Wall time of each compile-side stage, each timed on its own."""

    trace: float | None = None
    lower: float | None = None
    compile: float | None = None
    warm_up: float | None = Field(
        default=None,
        description="The uncounted warm-up executions, first call included (host-sync).",
    )


class CostAnalysis(OpenModel):
    """XLA's own estimate for the compiled program; None where the backend cannot say."""

    flops: float | None = None
    bytes_accessed: float | None = None


class MemoryAnalysis(OpenModel):
    """XLA's buffer sizes for the compiled program; None where the backend cannot say."""

    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    peak_bytes: int | None = None


class Rates(OpenModel):
    """Analytic work counts and the rates achieved at the median of the main boundary."""

    flops: float
    bytes: float
    boundary: BoundaryId | None = None
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    source: str = Field(
        default="analytic",
        description="Where the counts come from: 'analytic', or XLA's cost analysis.",
    )


class HloFusion(OpenModel):
    name: str
    kind: str
    calls: list[str] = Field(default_factory=list)
    backend_kind: str | None = Field(
        default=None, description="A custom fusion's own kind, e.g. __ynn_fusion, __triton_gemm."
    )
    library: str | None = Field(default=None, description="The library a custom fusion calls.")
    ops: list[str] = Field(
        default_factory=list, description="Distinct operations fused, in order of appearance."
    )


class HloCustomCall(OpenModel):
    target: str
    library: str | None = Field(default=None, description="e.g. cuBLAS, cuDNN, YNNPACK, oneDNN.")
    shape: str | None = None


class HloCollective(OpenModel):
    kind: str
    shape: str
    bytes: int | None = None
    replica_groups: str | None = None
    groups: list[list[int]] | None = Field(
        default=None, description="The replica groups as device-id lists, when they parse."
    )
    name: str | None = Field(default=None, description="The instruction's name in the HLO.")
    jax_op: str | None = Field(
        default=None, description="The JAX operation it came from (HLO op_name metadata)."
    )
    dimensions: list[int] | None = Field(
        default=None, description="The dimensions gathered or scattered, where stated."
    )
    asynchronous: bool = Field(default=False, description="Issued as a -start/-done pair.")


class HloSummary(OpenModel):
    """What the optimized HLO says XLA chose: fusions, library calls, communication."""

    fusions: list[HloFusion] = Field(default_factory=list)
    custom_calls: list[HloCustomCall] = Field(default_factory=list)
    collectives: list[HloCollective] = Field(default_factory=list)
    copies: int = 0
    transposes: int = 0
    instructions: int = 0
    op_counts: dict[str, int] = Field(default_factory=dict)
    libraries: list[str] = Field(
        default_factory=list, description="Libraries the program calls, e.g. cuBLAS, YNNPACK."
    )


# --- the scale stage: placement on a mesh and scaling series ----------------------------

PlacementKind = Literal["replicated", "partitioned", "gathered-and-redistributed"]


class ShardShapes(OpenModel):
    """What one device holds of each array: its shard's shape and its slice of the whole."""

    device: int
    process: int | None = None
    position: int | None = Field(
        default=None,
        description="The device's place in the mesh, row-major: the id replica groups use.",
    )
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    slices: dict[str, str] = Field(
        default_factory=dict, description="The shard's place in the global array, e.g. [0:64, :]."
    )


class DeviceMemory(OpenModel):
    """Bytes one device needs for the program; `source` says where each figure came from."""

    device: int
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    peak_bytes: int | None = None
    in_use_peak_bytes: int | None = Field(
        default=None, description="The device allocator's own peak, where the backend reports it."
    )
    source: str = ""


class Intermediate(OpenModel):
    """One value of the partitioned program and how it lies across the devices."""

    name: str
    op: str
    jax_op: str | None = None
    shape: str = Field(description="The per-device shape in the partitioned HLO.")
    placement: PlacementKind
    detail: str | None = None


class CollectiveExplanation(OpenModel):
    """Why one collective is in the program: which sharding choice put it there."""

    kind: str
    shape: str
    bytes: int | None = None
    groups: str | None = None
    source: str | None = Field(default=None, description="The value it moves, traced back.")
    jax_op: str | None = None
    because: str


class Placement(OpenModel):
    """How a run's arrays and intermediates are placed on its mesh."""

    devices: int
    mesh_shape: list[int]
    axis_names: list[str]
    axis_types: list[str] = Field(default_factory=list)
    in_specs: dict[str, str] = Field(default_factory=dict)
    out_spec: str = ""
    global_shapes: dict[str, list[int]] = Field(default_factory=dict)
    shards: list[ShardShapes] = Field(default_factory=list)
    memory: list[DeviceMemory] = Field(default_factory=list)
    memory_note: str | None = None
    intermediates: list[Intermediate] = Field(default_factory=list)
    explanations: list[CollectiveExplanation] = Field(default_factory=list)
    note: str | None = Field(default=None, description="e.g. that the devices are virtual.")


class ScalingPoint(OpenModel):
    """One device count of a scaling series, timed over the whole step."""

    devices: int
    mode: Literal["strong", "weak"]
    mesh_shape: list[int]
    global_shapes: dict[str, list[int]] = Field(default_factory=dict)
    per_device_shapes: dict[str, list[int]] = Field(default_factory=dict)
    boundary: BoundaryId = BoundaryId.HOST_SYNC
    samples_s: list[float] = Field(default_factory=list)
    median_s: float | None = Field(
        default=None, description="Median step time: call until every shard of the output is ready."
    )
    slowest_device_s: float | None = Field(
        default=None, description="The slowest participant's own time, where separable."
    )
    collectives: list[str] = Field(default_factory=list)
    correct: bool | None = None
    error: float | None = None
    note: str | None = None


class ScalingSeries(OpenModel):
    """Strong and/or weak scaling over device counts 1, 2, 4, … as one job."""

    points: list[ScalingPoint] = Field(default_factory=list)
    boundary: BoundaryId = BoundaryId.HOST_SYNC
    label: str = Field(description="What the timings are and are not, e.g. for virtual devices.")
    per_device_note: str | None = None
    skipped: list[str] = Field(default_factory=list)


class GroupProcess(OpenModel):
    """One process of a multi-process worker group and what it saw of a run."""

    process_id: int
    local_devices: int
    passed: bool | None = None
    error: float | None = None
    median_s: float | None = None
    message: str | None = None
    digest: str | None = Field(
        default=None, description="SHA-256 of the whole output as this process gathered it."
    )


class GroupReport(OpenModel):
    """A run made by several processes under jax.distributed, reported by process 0."""

    processes: int
    coordinator: str
    devices: int
    members: list[GroupProcess] = Field(default_factory=list)
    agreed: bool = Field(description="Every process computed the same output as process 0.")


class KernelResources(OpenModel):
    """What the CUDA assembler (ptxas) reported for one compiled kernel."""

    name: str
    arch: str
    registers: int | None = Field(default=None, description="Registers per thread.")
    shared_bytes: int | None = Field(default=None, description="Static shared memory per block.")
    constant_bytes: int | None = None
    stack_bytes: int | None = Field(default=None, description="Stack frame per thread.")
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    barriers: int | None = None
    source: str = Field(default="ptxas -v", description="The tool the figures came from.")


# --- profiles, shape sweeps and measured ceilings (issue 7) ------------------------------


class ProfileTrace(OpenModel):
    """A JAX profiler trace of a run's sampled calls, packed as a .tar.gz of the profiler's
    log directory (`plugins/profile/<run>/`: an .xplane.pb for XProf and .trace.json.gz
    files for Perfetto). The worker sends the bytes in `data_b64`; the server stores them
    as a file of the job and keeps only the description."""

    format: str = "tar.gz"
    size: int = Field(ge=0, description="Bytes of the packed archive.")
    sha256: str
    files: list[str] = Field(default_factory=list, description="Paths inside the archive.")
    perfetto: str | None = Field(
        default=None, description="The archive member Perfetto opens directly (.json.gz)."
    )
    covers: str = Field(description="What the trace spans, in words.")
    boundary: BoundaryId | None = None
    calls: int = Field(default=0, description="Executions inside the trace.")
    device: str = ""
    data_b64: str | None = Field(
        default=None, description="The archive, base64; dropped once the server has stored it."
    )
    stored: bool = Field(default=False, description="Set by the server once it keeps the bytes.")


class SweepPolicy(OpenModel):
    """One bucketing policy of a shape sweep: what it cost to compile and to run."""

    policy: str = Field(description="none, pow2 or multiple:N.")
    padded_sizes: list[int] = Field(description="The size each call actually ran at, in order.")
    traces: int = Field(description="Entries in the jitted function's cache after the sweep.")
    compilations: int = Field(description="Backend compilations counted (jax.monitoring).")
    compile_s: float = Field(description="Their total backend compile time.")
    trace_s: float = 0.0
    lower_s: float = 0.0
    first_pass_s: float = Field(description="The first pass, compiles included (host-sync).")
    steady_pass_s: float | None = Field(
        default=None, description="Median of the later passes: every shape once, all compiled."
    )
    steady_call_s: float | None = Field(default=None, description="steady_pass_s per call.")
    flops: float = Field(description="FLOPs executed in one pass, padding included.")
    useful_flops: float = Field(description="FLOPs the unpadded shapes need.")
    padding_waste_pct: float = Field(description="(flops - useful_flops) / useful_flops × 100.")


class SweepResult(OpenModel):
    """A shape sweep: the same sizes through one jitted function under each policy."""

    op: str
    sizes: list[int] = Field(description="The leading dimension of each call, in order.")
    policies: list[SweepPolicy] = Field(default_factory=list)
    note: str = ""


class Ceilings(OpenModel):
    """What a worker measured it can reach, once at start: the roofs of its roofline.

    Measured on the worker's own first device with host-sync timing, best of a few calls;
    never a datasheet figure."""

    device_kind: str
    copy_bytes_per_s: float | None = Field(
        default=None, description="A large device-to-device copy: bytes read + written per s."
    )
    copy_bytes: int | None = Field(default=None, description="Size of the array copied.")
    matmul_flops_per_s: dict[str, float] = Field(
        default_factory=dict, description="dtype → FLOP/s of a large square matmul."
    )
    matmul_sizes: dict[str, int] = Field(
        default_factory=dict, description="dtype → the matrix size n that was timed."
    )
    measured_at: str = Field(description="ISO time of the measurement.")
    seconds: float | None = Field(default=None, description="Time spent measuring.")
    method: str = ""
    worker: str | None = Field(
        default=None, description="The worker's name, added by the server to a run's copy."
    )


class InputInfo(OpenModel):
    name: str
    shape: list[int]
    dtype: str


class RunResult(OpenModel):
    """One attempt at a job, complete and self-describing.

    This is exactly what `boundary run --json` prints and what a worker posts.
    """

    protocol_version: int = PROTOCOL_VERSION
    job: JobSpec
    params: dict[str, Any] = Field(description="The parameters after validation and defaults.")
    inputs: list[InputInfo] = Field(default_factory=list)
    stage_seconds: StageSeconds = Field(default_factory=StageSeconds)
    artifacts: Artifacts = Field(default_factory=Artifacts)
    hlo_summary: HloSummary | None = None
    cost_analysis: CostAnalysis | None = None
    memory_analysis: MemoryAnalysis | None = None
    measurements: list[Measurement] = Field(default_factory=list)
    correctness: Correctness | None = None
    rates: Rates | None = None
    environment: Environment
    warnings: list[str] = Field(default_factory=list)
    valid: bool = Field(description="False when correctness failed: timings are then not results.")
    harness_seconds: float | None = Field(
        default=None, description="The harness's own time outside every reported interval."
    )
    kernel_resources: list[KernelResources] = Field(
        default_factory=list, description="cuda path: registers, shared memory, spills."
    )
    extra: dict[str, Any] = Field(default_factory=dict)
    placement: Placement | None = Field(default=None, description="Scale workloads: the mesh.")
    scaling: ScalingSeries | None = Field(default=None, description="The scale stage's series.")
    group: GroupReport | None = Field(default=None, description="A multi-process run's members.")
    profile: ProfileTrace | None = Field(default=None, description="measure.profile's trace.")
    sweep: SweepResult | None = Field(default=None, description="shape-sweep: each policy.")
    ceilings: Ceilings | None = Field(
        default=None, description="The running worker's measured ceilings (added by the server)."
    )


# --- workers ----------------------------------------------------------------------------


class Capabilities(OpenModel):
    """What a worker found on its machine. Detected, never assumed."""

    platform: Platform
    device_kind: str
    device_count: int = Field(ge=0)
    max_virtual_devices: int = Field(
        default=0, description="CPU workers can start runners with up to this many devices."
    )
    paths: list[PathId]
    jax_version: str | None = None
    jaxlib_version: str | None = None
    cuda_compile: bool = False
    cuda_run: bool = False
    protocol_version: int = PROTOCOL_VERSION
    catalog_version: int
    hostname: str | None = None
    ceilings: Ceilings | None = Field(default=None, description="Measured once at start.")


ProgressPhase = Literal[
    "queued",
    "leased",
    "traced",
    "lowered",
    "compiled",
    "warm-up",
    "sampling",
    "checked",
    "done",
    "failed",
]


class ProgressEvent(OpenModel):
    """A fine-grained step of a running job; streamed, throttled, never stored."""

    phase: ProgressPhase
    k: int | None = None
    n: int | None = None
    message: str | None = None
