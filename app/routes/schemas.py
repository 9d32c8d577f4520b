"""Shapes of the JSON API: what clients send and what they get back.

Names say their role (JobPublic, JobsPublic{data, count}, ...). The request of
POST /api/v1/jobs is `workers.protocol.JobSpec` itself, parsed strictly by hand (see
app.routes.api); worker messages are here because only the server reads them as models.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from workers.protocol import (
    Capabilities,
    JobStatus,
    MeasureOptions,
    PathId,
    ProgressEvent,
    RunResult,
    StageId,
)


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON Schema with its local $defs substituted in place.

    For `openapi_extra` request bodies of routes that parse their body by hand: OpenAPI
    cannot resolve a JSON Schema's own `#/$defs/...` references.
    """
    return inline_schema_of(model.model_json_schema())


def inline_schema_of(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema with its local $defs substituted in place (`inline_schema`)."""
    schema = dict(schema)
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result


class FieldError(BaseModel):
    field: str | None = Field(description="Dotted name of the offending field, e.g. params.m.")
    message: str


class ValidationErrorPublic(BaseModel):
    """A 422: every problem found, each naming its field; large input is never echoed."""

    detail: list[FieldError]


class MessagePublic(BaseModel):
    detail: str


SUBMIT_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": MessagePublic, "description": "Submission needs the bearer token."},
    413: {"model": MessagePublic, "description": "The body is too large."},
    415: {"model": MessagePublic, "description": "The body is not application/json."},
    422: {"model": ValidationErrorPublic, "description": "A field is wrong; it is named."},
    429: {
        "model": MessagePublic,
        "description": "Queue full or rate exceeded (a matrix counts its cells); see Retry-After.",
    },
}
"""What every route that queues work through the API may answer besides success."""


Answers = dict[int | str, dict[str, Any]]


def refusing(errors: Answers, beyond: str) -> Answers:
    """`errors` with a 422 that says what is refused besides what the schema states:
    `beyond`, the rules no JSON Schema can say (fields checked together, files stored)."""
    said = f"A field is wrong; it is named. Besides its schema, {beyond}."
    return {**errors, 422: {"model": ValidationErrorPublic, "description": said}}


class RunPublic(RunResult):
    """A run result with its artifacts capped for inline use and links to the full text."""

    attempt: int
    worker_id: str | None
    stored_at: str
    artifact_links: dict[str, str] = Field(
        description="Artifact name → URL of its full text (text/plain)."
    )
    artifacts_truncated: list[str] = Field(
        description="Artifacts cut for inline use; their links give the full text."
    )
    run_seconds: float | None = Field(
        default=None, description="The runner's wall time for the whole job, as it reported it."
    )


class JobLinks(BaseModel):
    self: str
    events: str
    cancel: str


class JobSummary(BaseModel):
    """A job without its run: what listings return."""

    id: str
    status: JobStatus
    reason: str | None = Field(
        description="Why it failed, expired or was cancelled; for a queued job, why it waits."
    )
    attempts: int
    workload: str
    path: PathId
    params: dict[str, Any]
    stages: list[StageId]
    measure: MeasureOptions
    target: str | None = Field(
        default=None, description="What the compiler compiles for, e.g. v6e:2x4 or b200:1."
    )
    compiler_options: dict[str, bool | int | str] = Field(
        default_factory=dict,
        description="XLA options every compile of the job had, e.g. "
        '{"xla_gpu_enable_triton_gemm": false}; {} for none.',
    )
    created_at: str
    updated_at: str
    worker_id: str | None = Field(description="The worker that last held the job.")
    worker_name: str | None = Field(default=None, description="That worker's name, if it gave one.")
    progress: ProgressEvent | None = Field(
        default=None, description="Latest progress of a running job (memory only)."
    )
    stderr_tail: str | None = None
    links: JobLinks


class FollowUpPublic(BaseModel):
    """The job that brings a compiled run's dumps after it (TPU bundles, GPU PTX and SASS,
    the pass pipeline): the run is published when its compile ends, these follow."""

    job: str = Field(description="The follow-up job's id (its page is /runs/{job}).")
    status: JobStatus
    reason: str | None = Field(description="Why it waits, failed or was cancelled.")
    pending: list[str] = Field(
        description="Artifacts it has yet to bring; [] once done (they are in the run then)."
    )
    links: JobLinks


class JobPublic(JobSummary):
    """A job with its run inline when it has one."""

    run: RunPublic | None = None
    dumps: FollowUpPublic | None = Field(
        default=None,
        description="A compile without the hardware: the follow-up job that brings the "
        "dumps below its optimized HLO, which the run shows merged in once done.",
    )


class JobsPublic(BaseModel):
    data: list[JobSummary]
    count: int = Field(description="Jobs matching the filters, beyond `limit` too.")


class WorkloadsPublic(BaseModel):
    data: list[dict[str, Any]]
    count: int


class TargetPublic(BaseModel):
    id: str
    model: str
    chip: str
    path: str = Field(description="The path the target names.")
    devices: int = Field(description="Devices as the compiler lists them.")
    chips: int
    grid: list[int] | None = Field(description="A TPU slice's chip grid.")
    usable_bytes: int | None = Field(
        description="What one device may hold: on a TPU what libtpu makes available to a "
        "program (read from libtpu by a connected worker; null until one has), on a GPU "
        "JAX's default share of the HBM."
    )
    usable_source: str
    hbm_bytes: int = Field(description="The published HBM of one device, in bytes.")
    hbm_label: str
    compiled_by: list[str] = Field(description="Connected workers that compile for it.")
    executed_by: list[str] = Field(description="Connected workers with its chips.")


class TargetsPublic(BaseModel):
    data: list[TargetPublic]
    count: int
    chips: list[dict[str, Any]] = Field(
        description="Each device model's published figures (HBM, bandwidth, peak rates "
        "per dtype, the clock), each with its source."
    )


class WorkerPublic(BaseModel):
    id: str
    name: str | None
    platform: str
    paths: list[PathId]
    device_kind: str
    device_count: int
    max_virtual_devices: int
    cuda_compile: bool
    cuda_run: bool
    targets: list[str] = Field(
        default_factory=list, description="Targets it compiles for without the hardware."
    )
    capacities: dict[str, int] = Field(
        default_factory=dict,
        description="TPU target id → usable_bytes: what its libtpu makes available to a "
        "program on that target, read by compiling.",
    )
    jax_version: str | None
    hostname: str | None
    registered_at: str
    last_heartbeat: str
    last_heartbeat_age_s: float
    current_job: str | None
    polling: bool


class WorkersPublic(BaseModel):
    data: list[WorkerPublic]
    count: int


# --- worker API -------------------------------------------------------------------------


class WorkerMessage(BaseModel):
    """A message from a worker, which may be newer than us: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class WorkerRegister(WorkerMessage):
    capabilities: Capabilities
    name: str | None = Field(default=None, max_length=200)
    worker_id: str | None = Field(
        default=None,
        max_length=64,
        description="The id it had, when registering again; kept only with its key.",
    )
    worker_key: str | None = Field(
        default=None, max_length=64, description="The key its first registration returned."
    )


class RegisterReply(BaseModel):
    worker_id: str
    worker_key: str = Field(description="Present it with worker_id to register again.")
    lease_s: float
    heartbeat_s: float
    poll_s: float
    job_timeout_s: float
    artifact_max_bytes: int


class LeaseRequest(WorkerMessage):
    worker_id: str
    worker_key: str | None = Field(
        default=None, max_length=64, description="The key its registration returned."
    )
    wait_s: float | None = Field(default=None, ge=0, le=60)


class LeaseReply(BaseModel):
    job_id: str
    lease_id: str = Field(description="Present it with every report on this job.")
    attempt: int
    spec: dict[str, Any]
    requirements: dict[str, Any]
    lease_deadline: float
    timeout_s: float


class HeartbeatRequest(WorkerMessage):
    worker_id: str
    worker_key: str | None = Field(
        default=None, max_length=64, description="The key its registration returned."
    )
    job_id: str | None = None
    lease_id: str | None = Field(default=None, max_length=64)


class ProgressReport(WorkerMessage):
    worker_id: str
    worker_key: str | None = Field(
        default=None, max_length=64, description="The key its registration returned."
    )
    job_id: str
    lease_id: str | None = Field(default=None, max_length=64)
    events: list[ProgressEvent] = Field(max_length=1000)


class Failure(WorkerMessage):
    reason: str = Field(max_length=20_000)
    stderr_tail: str | None = Field(default=None, max_length=64_000)


MAX_RUN_SECONDS = 86_400.0
"""The longest whole-job time a worker may report: a day, far beyond any job's timeout."""


class ResultReport(WorkerMessage):
    """Exactly one of `result` and `failure`."""

    worker_id: str
    worker_key: str | None = Field(
        default=None, max_length=64, description="The key its registration returned."
    )
    job_id: str
    lease_id: str | None = Field(default=None, max_length=64)
    attempt: int = Field(default=0, description="Ignored: the server counts attempts.")
    result: RunResult | None = None
    failure: Failure | None = None
    run_seconds: float | None = Field(
        default=None,
        ge=0,
        le=MAX_RUN_SECONDS,
        description="The runner's wall time for the whole job, in seconds (at most a day).",
    )


class ReleaseRequest(WorkerMessage):
    worker_id: str
    worker_key: str | None = Field(
        default=None, max_length=64, description="The key its registration returned."
    )
    job_id: str
    lease_id: str | None = Field(default=None, max_length=64)


class ReportReply(BaseModel):
    """The server's answer to a worker's report."""

    accepted: bool
    status: JobStatus
    cancel: bool = False
    reason: str | None = None
    detail: list[FieldError] | None = Field(
        default=None,
        description="A result refused for its environment (409): each field that is not "
        "the registered worker's; the job has ended failed.",
    )


# --- the worker API's documented errors ---------------------------------------------

KEYED: dict[int | str, dict[str, Any]] = {
    403: {
        "model": MessagePublic,
        "description": "worker_key is not the key of the worker named: a worker may only "
        "lease and report as itself.",
    },
}

ENDED: dict[int | str, dict[str, Any]] = {
    **KEYED,
    404: {"model": MessagePublic, "description": "Unknown worker or job."},
    409: {
        "model": ReportReply,
        "description": "The lease has ended; nothing changed. On /result also: the run's "
        "environment is not the worker's (`detail` names the fields; the job ended failed).",
    },
}

RESULT_ERRORS: dict[int | str, dict[str, Any]] = {
    **ENDED,
    422: {
        "model": ValidationErrorPublic,
        "description": "A field is wrong, or the result is not the job its lease carries "
        "(the field is named, e.g. result.job.params): besides its schema, the job's "
        "parameters, compiler options and target as the catalog checks them together, the "
        "boundaries, subjects and samples its job allows, an upload's results as its header "
        "names them.",
    },
}
