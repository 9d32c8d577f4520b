"""The vocabulary every message uses, and the two kinds of model.

Pydantic only, no jax: the server imports this package, so it must stay light.
Names follow DESIGN.md's vocabulary. Fields may be added; nothing is ever renamed.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Strict

PROTOCOL_VERSION = 6
"""Bumped when a message changes shape in a way an older peer cannot read.

2: the server assigns worker ids; each lease carries a lease id that every report on the
job presents; attempts are counted by the server alone.
3: the server gates every result as the publish step does (`workers.protocol.gate`) and
refuses one whose job differs from the lease; worker bodies are strict JSON (no NaN);
measurements carry their warm-up discards and shape, and sampling writes no counts or
times into warnings.
4: every message after registration (lease, heartbeat, progress, result, release) carries
the worker_key its registration returned beside its worker_id: a worker id is public, the
key is not.
6: a compile for a target may ask for no dumps at all (`dumps: none`, a fit search's
probe), which an older worker cannot read."""

MAX_SAMPLES = 5000
"""The most samples one measurement may take (the contract asks for at least 1,000)."""
WARMUP_CAP_FACTOR = 10
"""A fixed count of N takes at most this many times N samples in all, those discarded
while the timings settled included (the server refuses a measurement with more)."""


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
    DEVICE_TIME = "device-time"


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


class Dumps(StrEnum):
    """When a compile without the hardware sends its dumps (machine code, the kernels'
    own IR, the pass pipeline), each of which takes one more compile."""

    INLINE = "inline"
    """With the run: the run waits for them."""
    LATER = "later"
    """The run goes first (HLO, summary, memory); a follow-up job brings the dumps."""
    ONLY = "only"
    """The follow-up: only the dumps of a run that went first."""
    NONE = "none"
    """No dumps, and no follow-up: the run alone (a fit search's probe compiles once)."""


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

MAIN_BOUNDARY: dict[Mode, BoundaryId] = {
    Mode.LATENCY: BoundaryId.HOST_SYNC,
    Mode.THROUGHPUT: BoundaryId.HOST_THROUGHPUT,
    Mode.APPLICATION: BoundaryId.APPLICATION,
    Mode.DISPATCH: BoundaryId.HOST_DISPATCH,
}
"""The one boundary that stands for each mode: a matrix's cell shows it, and a run's
achieved rates are computed from its median (never `host-dispatch`'s: no speed)."""
assert all(b in MODE_BOUNDARIES[m] for m, b in MAIN_BOUNDARY.items())

NEVER_A_SPEED: frozenset[BoundaryId] = frozenset({BoundaryId.HOST_DISPATCH})
"""Boundaries whose times are no speed: no calls per second and no rate comes from them."""

PATH_PLATFORM: dict[PathId, Platform] = {
    PathId.JAX_GPU: Platform.GPU,
    PathId.JAX_TPU: Platform.TPU,
    PathId.CUDA: Platform.GPU,
    PathId.JAX_CPU: Platform.CPU,
}
"""The JAX platform a path needs (the CUDA path needs an NVIDIA GPU to execute)."""
