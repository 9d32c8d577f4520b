"""A run: what came back from one attempt at a job."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from workers.protocol.artifacts import Artifacts
from workers.protocol.base import PROTOCOL_VERSION, BoundaryId, CachePolicy, OpenModel
from workers.protocol.device import DeviceTime, Prediction
from workers.protocol.jobs import JobSpec
from workers.protocol.memory import MemoryReport
from workers.protocol.profiles import ProfileTrace
from workers.protocol.scale import GroupReport, Placement, ScalingSeries
from workers.protocol.sweeps import SweepResult
from workers.protocol.targets import TargetReport
from workers.protocol.verdict import Correctness
from workers.protocol.workers import Ceilings


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
    ops: float | None = Field(
        default=None,
        description="Calls per second at the mean, set by the publish step; None under a "
        "boundary that is no speed (host-dispatch).",
    )
    wide_spread: bool = Field(default=False, description="IQR / median above the warning level.")


Shape = Literal["bimodal", "drifting"]
"""What kept samples look like when they are not one steady population."""


class Measurement(OpenModel):
    """Samples under one timing boundary, with their statistics."""

    boundary: BoundaryId
    samples_s: list[float]
    stats: Stats | None
    calls_per_sample: int = 1
    stopped_because: str | None = None
    warmup_discarded: int | None = Field(
        default=None,
        description="Timed samples taken before `samples_s` and discarded while the timings "
        "were still settling (0: none); None when withheld.",
    )
    warmup_samples_s: list[float] = Field(
        default_factory=list, description="Those discarded samples, in the order taken."
    )
    shape: Shape | None = Field(
        default=None,
        description="'bimodal' (two clusters of times), 'drifting' (the times move with "
        "time), or None: steady, or not judged (see `shape_checked`).",
    )
    shape_checked: bool | None = Field(
        default=None,
        description="Whether there were samples enough (10) to judge warm-up and shape. "
        "False: nothing was discarded and no shape judged; None: withheld.",
    )
    note: str | None = None
    subject: str | None = Field(
        default=None,
        description="What was timed when a run times several implementations, e.g. cuBLAS.",
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
    alias_bytes: int | None = Field(default=None, description="Arguments the outputs reuse.")


class Rates(OpenModel):
    """Analytic work counts and the rates achieved at the median of the main boundary."""

    flops: float
    bytes: float
    boundary: BoundaryId | None = None
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    subject: str | None = Field(default=None, description="The subject whose median is used.")
    calls: int = Field(default=1, ge=1, description="Per-call times the counted work spans.")
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


class HloExplained(OpenModel):
    """One fusion, library call or collective of the optimized HLO, explained: what it is,
    what it moves, the source lines it came from and the pass that made it (added by the
    server from the run's own HLO, source and pass pipeline)."""

    name: str
    op: str = Field(description="fusion, custom-call, all-reduce-start, ...")
    kind: str = Field(description="The fusion kind, custom-call target or collective.")
    shape: str
    bytes: int | None = Field(default=None, description="Bytes of the result's arrays.")
    source: list[str] = Field(
        default_factory=list,
        description="Source lines it came from: the workload's line numbers, or file:line.",
    )
    made_by: str | None = Field(
        default=None, description="The first pass after which its name appears (pipeline runs)."
    )
    pipeline_step: int | None = None


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


class InputInfo(OpenModel):
    name: str
    shape: list[int]
    dtype: str


class SourceText(OpenModel):
    """The Python source of the workload function a worker ran, as that worker has it.

    A remote worker may run another version of a catalog workload than the server's
    checkout; the page shows this text, so what a reader sees is what ran. IR positions
    (`file:line`) whose file ends with `path` point into it.
    """

    path: str = Field(description="The file, relative to the worker's package root.")
    function: str = Field(description="The qualified name of the function shown.")
    first_line: int = Field(ge=1, description="The file line of the text's first line.")
    text: str = Field(max_length=200_000)
    sha256: str = Field(description="SHA-256 of `text` (UTF-8), hex.")


class PipelineStep(OpenModel):
    """One module snapshot XLA dumped during compilation: the state after `changed` ran.

    XLA writes a snapshot only when a pass changed the module, naming the pass that did
    (`after_X`) and the pass that runs next (`before_Y`); a pass named as next that did not
    produce the following snapshot ran without changing anything.
    """

    order: int = Field(ge=0, description="XLA's own sequence number of the snapshot.")
    pipeline: str = Field(description="The pass pipeline, e.g. simplification, spmd-partitioner.")
    changed: str = Field(description="The pass after which this snapshot was taken.")
    next: str | None = Field(default=None, description="The pass that runs next.")
    snapshot: int = Field(ge=0, description="Index into PipelineCapture.snapshots.")


class PipelineCapture(OpenModel):
    """XLA's pass pipeline for one compile of the run's program, from its per-pass dump."""

    steps: list[PipelineStep] = Field(default_factory=list)
    snapshots: list[str] = Field(
        default_factory=list,
        description="Distinct module texts: [0] before optimization, then each step's, in order.",
    )
    final: str | None = Field(default=None, description="The dumped module after optimizations.")
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Other compiler reports kept whole: priority_fusion_dump.txt and "
        "thunk_sequence.txt on GPU targets.",
    )
    bytes: int = Field(default=0, description="Text bytes kept.")
    cut: str | None = Field(default=None, description="Why the capture stopped early, if it did.")
    capture_s: float | None = Field(
        default=None, description="Seconds the extra compile and reading the dump took."
    )


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
    artifacts_cut: list[str] = Field(
        default_factory=list, description="Artifacts the worker cut to the server's cap."
    )
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
    source: SourceText | None = Field(
        default=None, description="The workload function's source, linked to the IR lines."
    )
    pipeline: PipelineCapture | None = Field(
        default=None, description="measure.pipeline: XLA's passes, in order, with snapshots."
    )
    kernel_pipelines: dict[str, PipelineCapture] = Field(
        default_factory=dict,
        description="measure.pipeline with Pallas kernels: each kernel's own compiler passes "
        "(pipelines mosaic and llo on TPU, triton or mosaic_gpu on GPU), by kernel name.",
    )
    hlo_explained: list[HloExplained] | None = Field(
        default=None,
        description="Each fusion, library call and collective with its source lines and pass "
        "(added by the server).",
    )
    ceilings: Ceilings | None = Field(
        default=None, description="The running worker's measured ceilings (added by the server)."
    )
    target: TargetReport | None = Field(
        default=None, description="What the compiler compiled for, and whether it ran there."
    )
    memory_report: MemoryReport | None = Field(
        default=None, description="The compiler's buffer assignment for one device, read out."
    )
    device_time: DeviceTime | None = Field(
        default=None, description="A real chip's profiled pass: its planes and instructions."
    )
    prediction: Prediction | None = Field(
        default=None, description="A real chip's own target compiled without it, beside it."
    )
