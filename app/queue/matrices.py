"""What a matrix submission says, and how it expands into jobs (or reasons for none).

A matrix names a workload (catalog or exported), base parameters, a row axis — one
parameter's values, or whole shapes (objects of parameters) — and the paths to run on,
optionally crossed with a second parameter per column. Every cell is validated exactly
like a job submitted alone; a cell that cannot run (the workload does not offer that
path, a value out of bounds, an artifact not exported for that platform) keeps the
reason instead of a job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, FiniteFloat, model_validator

from app.queue.job_files import with_files
from app.queue.validation import JobRefused, ValidJob, validate_job
from app.store import Store
from workers.catalog.jaxexport import ArtifactError, read_header
from workers.protocol import (
    MAIN_BOUNDARY,
    BoundaryId,
    Lax,
    MeasureOptions,
    PathId,
    StageId,
    StrictModel,
    TargetError,
    parse_target,
)

MAX_VALUES = 24
MAX_CELLS = 96
SHAPE = "shape"
"""The row axis whose values are whole shapes: objects of parameter values."""
OPTIONS = "compiler_options"
"""The axis whose values are compiler options (objects of XLA options; {} for none)."""
OBJECT_AXES = (SHAPE, OPTIONS)

Scalar = int | FiniteFloat | str | bool
Value = Scalar | dict[str, Scalar]


class MatrixAxis(StrictModel):
    """A parameter and the values it takes along the axis."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    values: list[Value] = Field(min_length=1, max_length=MAX_VALUES)

    @model_validator(mode="after")
    def _values_fit_the_name(self) -> MatrixAxis:
        for value in self.values:
            if isinstance(value, dict) != (self.name in OBJECT_AXES):
                raise ValueError(
                    "values of the 'shape' axis are objects of parameters (e.g. "
                    '{"m": 512, "k": 512}), of the \'compiler_options\' axis objects of XLA '
                    'options (e.g. {"xla_gpu_enable_triton_gemm": false}, or {} for none); '
                    "any other axis takes plain values"
                )
            if isinstance(value, dict) and not value and self.name == SHAPE:
                raise ValueError("a shape names at least one parameter")
        if len(
            {repr(sorted(v.items())) if isinstance(v, dict) else repr(v) for v in self.values}
        ) != len(self.values):
            raise ValueError("a value is given twice")
        return self


class MatrixSpec(StrictModel):
    """A matrix submission: POST /api/v1/matrices."""

    workload: str = Field(min_length=1, max_length=64)
    base_params: dict[str, Any] = Field(default_factory=dict)
    axis: MatrixAxis = Field(description="The rows: one parameter's values, or shapes.")
    paths: list[Annotated[PathId, Lax]] = Field(default_factory=list, max_length=4)
    targets: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=12,
        description=(
            "Compile-only columns, one per target ('cpu' for the host reference, or a "
            "target id such as v6e:2x4 or b200:1), each on the path it goes with (the first "
            "of `paths` that does, else jax-tpu for a TPU slice and jax-gpu for GPUs)."
        ),
    )
    columns: MatrixAxis | None = Field(
        default=None, description="Optional: a parameter crossed with each path as columns."
    )
    stages: list[Annotated[StageId, Lax]] = Field(
        default_factory=lambda: [StageId.COMPILE, StageId.EXECUTE], min_length=1, max_length=3
    )
    measure: MeasureOptions = Field(default_factory=MeasureOptions)
    title: str | None = Field(default=None, max_length=120)

    @model_validator(mode="before")
    @classmethod
    def _targets_compile(cls, data: Any) -> Any:
        # Target columns compare what compilers produce: compile only, unless asked.
        if isinstance(data, dict) and data.get("targets") and "stages" not in data:
            return {**data, "stages": [StageId.COMPILE.value]}
        return data

    @model_validator(mode="after")
    def _bounded(self) -> MatrixSpec:
        if not self.paths and not self.targets:
            raise ValueError("name at least one path (paths) or target (targets)")
        if self.targets is not None:
            if len(set(self.targets)) != len(self.targets):
                raise ValueError("a target is named twice")
            for text in self.targets:
                target_path(text, self.paths)  # raises naming what is wrong
            if any(s is not StageId.COMPILE for s in self.stages):
                raise ValueError(
                    "a matrix with targets compiles only (stages: compile): most targets "
                    "are compiled without their hardware, so no cell would have a time"
                )
        if len(set(self.paths)) != len(self.paths):
            raise ValueError("a path is named twice")
        if self.columns is not None and self.columns.name == SHAPE:
            raise ValueError("columns take one parameter's values, not shapes")
        width = len(self.targets) if self.targets else len(self.paths)
        cells = len(self.axis.values) * width * len(self.column_values())
        if cells > MAX_CELLS:
            raise ValueError(f"{cells} cells: a matrix holds at most {MAX_CELLS}")
        return self

    def column_values(self) -> list[Value | None]:
        return list(self.columns.values) if self.columns is not None else [None]

    def boundary(self) -> BoundaryId:
        return MAIN_BOUNDARY[self.measure.mode]


HOST = "cpu"
"""The target column for the host reference: jax-cpu with no target."""


def target_path(text: str, paths: list[PathId]) -> tuple[PathId, str | None]:
    """The path a target column runs on, and its target id (None for the host)."""
    if text == HOST:
        return PathId.JAX_CPU, None
    try:
        target = parse_target(text)
    except TargetError as exc:
        raise ValueError(f"targets: {exc}") from None
    for path in paths:
        if path in target.chip.paths:
            return path, target.id
    return target.chip.paths[0], target.id


@dataclass(frozen=True)
class Column:
    """One column: a path (and a target), with the column parameter's value if any."""

    path: PathId
    value: Value | None
    label: str
    target: str | None = None


@dataclass
class Cell:
    """One row × column: the job to submit, or why there is none."""

    row: int
    col: int
    valid: ValidJob | None = None
    reason: str | None = None


def row_label(axis: MatrixAxis, value: Value, store: Store | None = None) -> str:
    """How a row is titled, e.g. 'm=512' or 'm=512, k=256' (an artifact: its arguments)."""
    if axis.name == OPTIONS:
        return _column_label(axis, value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if axis.name == "artifact" and isinstance(value, str) and store is not None:
        found = store.open_file(value) if len(value) == 64 else None
        if found is not None:
            try:
                with found:
                    header = read_header(found)
            except (ArtifactError, OSError):
                return f"artifact {value[:12]}…"
            return f"{header.function_name}({', '.join(a.text() for a in header.in_avals)})"
        return f"artifact {value[:12]}…"
    return f"{axis.name}={value}"


def _column_label(axis: MatrixAxis, value: Value | None) -> str:
    """How a column's parameter value reads in its heading ("dtype=bfloat16",
    "xla_gpu_enable_triton_gemm=false", "no compiler options")."""
    if axis.name == OPTIONS and isinstance(value, dict):
        return "no compiler options" if not value else _options_text(value)
    return f"{axis.name}={value}"


def _options_text(value: dict[str, Scalar]) -> str:
    return ", ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in value.items()
    )


def columns_of(spec: MatrixSpec) -> list[Column]:
    out = []
    for text in spec.targets or []:
        path, target = target_path(text, spec.paths)
        for value in spec.column_values():
            label = f"{text} ({path.value})"
            if spec.columns is not None:
                label = f"{label} · {_column_label(spec.columns, value)}"
            out.append(Column(path, value, label, target))
    if spec.targets:
        return out
    for path in spec.paths:
        for value in spec.column_values():
            label = path.value
            if spec.columns is not None:
                label = f"{path.value} · {_column_label(spec.columns, value)}"
            out.append(Column(path, value, label))
    return out


def _assign(body: dict[str, Any], axis: MatrixAxis | None, value: Value | None) -> None:
    """Put an axis's value in a cell's job: its parameters, or its compiler options."""
    if axis is None or value is None:
        return
    if axis.name == OPTIONS:
        if value:
            body["compiler_options"] = value
    elif isinstance(value, dict):
        body["params"].update(value)
    else:
        body["params"][axis.name] = value


def expand(spec: MatrixSpec, store: Store, max_job_bytes: int) -> list[Cell]:
    """Every cell of `spec`, each validated like a job submitted alone."""
    cells = []
    for i, row_value in enumerate(spec.axis.values):
        for j, column in enumerate(columns_of(spec)):
            body: dict[str, Any] = {
                "workload": spec.workload,
                "path": column.path.value,
                "params": dict(spec.base_params),
                "stages": [s.value for s in spec.stages],
                "measure": spec.measure.model_dump(mode="json"),
            }
            _assign(body, spec.axis, row_value)
            _assign(body, spec.columns, column.value)
            if column.target is not None:
                body["target"] = column.target
            cell = Cell(i, j)
            try:
                valid, problems = with_files(
                    validate_job(body, max_job_bytes), store, max_job_bytes
                )
            except JobRefused as exc:
                cell.reason = _reason(exc)
            else:
                if problems:
                    cell.reason = "; ".join(f"{f}: {m}" for f, m in problems)
                else:
                    cell.valid = valid
            cells.append(cell)
    return cells


def _reason(exc: JobRefused) -> str:
    return "; ".join(
        f"{d['field']}: {d['message']}"
        if d.get("field") and not str(d["message"]).startswith(str(d["field"]))
        else str(d["message"])
        for d in exc.detail()
    )
