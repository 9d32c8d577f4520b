"""What a fit search submission says, and the job each of its probes submits.

A search names a program (a catalog workload, or an uploaded artifact by its SHA-256),
the integer it varies (`dimension`: a workload's integer parameter such as `batch` or
`m`, or one of the artifact's symbolic dimensions), the values it may take (`range`
and `step`) and the targets. `probe_job` is the one place that turns a value into a
job: a catalog parameter takes it as `params[dimension]`, a symbolic dimension as
`params.dims[dimension]`. Each probe is checked like a job submitted alone; a search is
refused (422, naming the field) unless its probes at both ends of the range could be.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from app.queue.fit_criteria import DEFAULT_USABLE_FRACTION
from app.queue.fit_plan import Grid
from app.queue.job_files import with_files
from app.queue.validation import JobRefused, ValidJob, validate_job
from app.store import Store
from workers.catalog import WORKLOADS
from workers.protocol import (
    Dumps,
    Lax,
    PathId,
    StageId,
    StrictModel,
    TargetError,
    parse_target,
)

MAX_TARGETS = 8
MAX_VALUES = 2**31
"""The most values a range may hold (bisection would take 32 compiles)."""
EXPORTED = "exported"
Problems = list[tuple[str | None, str]]


class FitSpec(StrictModel):
    """A fit search: POST /api/v1/fits."""

    workload: str | None = Field(
        default=None, min_length=1, max_length=64, description="A catalog workload's name."
    )
    artifact: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="Or an uploaded exported function, by its SHA-256.",
    )
    path: Annotated[PathId, Lax] | None = Field(
        default=None,
        description="The path every target compiles on; by default each target's own "
        "(jax-tpu for a TPU slice, jax-gpu for NVIDIA GPUs).",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="The program's other parameters, as for a job."
    )
    dimension: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The integer searched: a workload's integer parameter, or one of the "
        "artifact's symbolic dimensions.",
    )
    range: list[Annotated[int, Field(ge=0, le=2**62)]] = Field(
        min_length=2, max_length=2, description="[lo, hi], both included."
    )
    step: int = Field(default=1, ge=1, le=2**31, description="Values are lo + k × step.")
    targets: list[str] = Field(min_length=1, max_length=MAX_TARGETS)
    usable_fraction: float | None = Field(
        default=None,
        ge=0.01,
        le=1,
        description="GPU targets: the share of the published HBM a peak may use "
        f"(default {DEFAULT_USABLE_FRACTION}, JAX's GPU allocator's own).",
    )

    @property
    def grid(self) -> Grid:
        return Grid(self.range[0], self.range[1], self.step)

    def problems(self) -> Problems:
        """What is wrong across its fields, each named (the fields alone are checked by
        the model): one program, a range on the step's grid, targets that exist, once,
        each on a path that suits it."""
        found: Problems = []
        if (self.workload is None) == (self.artifact is None):
            found.append(("workload", "name the program: either workload or artifact"))
        lo, hi = self.range
        if hi < lo:
            found.append(("range", f"hi ({hi}) is below lo ({lo})"))
        elif (hi - lo) % self.step:
            found.append(("step", f"hi - lo ({hi - lo}) is not a multiple of step ({self.step})"))
        elif (hi - lo) // self.step + 1 > MAX_VALUES:
            found.append(("range", f"more than {MAX_VALUES:,} values (raise step)"))
        if len(set(self.targets)) != len(self.targets):
            found.append(("targets", "a target is named twice"))
        if self.path is PathId.CUDA:
            found.append(
                (
                    "path",
                    "a fit search compiles with XLA (jax-tpu, jax-gpu): the cuda path "
                    "has no memory_analysis() peak",
                )
            )
        for text in self.targets:
            try:
                target = parse_target(text)
            except TargetError as exc:
                found.append(("targets", str(exc)))
                continue
            if self.path is not None and self.path not in target.chip.paths:
                offered = " or ".join(p.value for p in target.chip.paths)
                found.append(
                    (
                        "path",
                        f"{self.path.value} does not suit target {target.id} (it takes "
                        f"{offered}); leave path out to compile each target on its own",
                    )
                )
        return found

    @property
    def program(self) -> str:
        """The workload a probe runs: the catalog's, or `exported` for an artifact."""
        return self.workload if self.workload is not None else EXPORTED


def path_for(spec: FitSpec, target: str) -> PathId:
    """The path `target`'s probes compile on."""
    return spec.path or parse_target(target).chip.paths[0]


def probe_job(spec: FitSpec, target: str, value: int) -> dict[str, Any]:
    """The job of one probe: `spec`'s program with its dimension at `value`, compiled
    once for `target` without the hardware, with no dumps and no follow-up
    (`dumps: none`); its run keeps its memory report and its peak."""
    params = dict(spec.params)
    if spec.artifact is not None:
        params["artifact"] = spec.artifact
        params["dims"] = {**(params.get("dims") or {}), spec.dimension: value}
    else:
        params[spec.dimension] = value
    return {
        "workload": spec.program,
        "path": path_for(spec, target).value,
        "params": params,
        "target": target,
        "stages": [StageId.COMPILE.value],
        "dumps": Dumps.NONE.value,
        # A GPU compile is held against the search's own share of the HBM, on its page too.
        **(
            {"usable_fraction": spec.usable_fraction}
            if spec.usable_fraction is not None
            and parse_target(target).chip.platform.value == "gpu"
            else {}
        ),
    }


def probe_valid(
    spec: FitSpec, target: str, value: int, store: Store, max_job_bytes: int
) -> tuple[ValidJob | None, Problems]:
    """The probe's job as a job submitted alone is checked (its files too), or its
    problems, each named by the search's own field where it is one."""
    try:
        valid, problems = with_files(
            validate_job(probe_job(spec, target, value), max_job_bytes), store, max_job_bytes
        )
    except JobRefused as exc:
        return None, [(_field_of(spec, f, m), m) for f, m in exc.problems]
    return (None if problems else valid), [(_field_of(spec, f, m), m) for f, m in problems]


def _field_of(spec: FitSpec, field: str | None, message: str) -> str | None:
    """The search's field a probe job's problem is about."""
    own = f"params.dims.{spec.dimension}" if spec.artifact else f"params.{spec.dimension}"
    if field == own:
        return "dimension" if "has no dimension" in message else "range"
    if field == "target":
        return "targets"
    if field in ("params.artifact", "workload"):
        return "artifact" if spec.artifact else "workload"
    if spec.artifact and field is not None and field.startswith("params.dims."):
        return "dimension" if field.endswith(f".{spec.dimension}") else field
    return field


def check_fit(spec: FitSpec, store: Store, max_job_bytes: int) -> Problems:
    """Every problem with `spec` beyond its own fields: those across them
    (`FitSpec.problems`), then the dimension must be an integer of the program, and
    each target's probes at both ends of the range must pass the checks a job passes."""
    across = spec.problems()
    if across:
        return across
    taken = "the searched dimension takes its values from range"
    if spec.workload is not None:
        problem = _integer_parameter(spec.workload, spec.dimension)
        if problem is not None:
            return [problem]
        if spec.dimension in spec.params:
            return [(f"params.{spec.dimension}", taken)]
    elif spec.dimension in (spec.params.get("dims") or {}):
        return [(f"params.dims.{spec.dimension}", taken)]
    problems: Problems = []
    for target in spec.targets:
        for value in dict.fromkeys(spec.range):
            _, found = probe_valid(spec, target, value, store, max_job_bytes)
            problems += [p for p in found if p not in problems]
    return problems


def integer_parameters(workload: str) -> list[str]:
    """The integer parameters of a catalog workload, which a search may vary."""
    cls = WORKLOADS.get(workload)
    if cls is None or workload == EXPORTED:
        return []
    return [
        n
        for n, f in cls.model_fields.items()
        if f.annotation is int and f.alias is None and not n.endswith("_")
    ]


def _integer_parameter(workload: str, name: str) -> tuple[str, str] | None:
    """Why `name` is no integer parameter of `workload` (None when it is one)."""
    if workload not in WORKLOADS or workload == EXPORTED:
        known = ", ".join(n for n in WORKLOADS if n != EXPORTED)
        return "workload", f"no workload {workload[:64]!r} (known: {known}; or give artifact)"
    integers = integer_parameters(workload)
    if name not in integers:
        return (
            "dimension",
            f"{workload} has no integer parameter {name!r} (its integers: {', '.join(integers)})",
        )
    return None
