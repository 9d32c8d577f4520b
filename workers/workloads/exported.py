"""`exported` on JAX: a deserialized `jax.export.Exported`, run like a catalog workload.

Nothing of the user's Python runs here: the artifact is StableHLO plus its calling
convention (`workers.workloads.artifact` loads and checks it). Its arguments and results
may be any pytree: the function traced is the artifact called on its flat arguments,
rebuilt into its own tree, returning its flat results (`workers.export.meshes.flat_call`),
so trace → lower → compile → execute are the stages every workload goes through. Each
argument and result is named by its tree path (`params/blocks/0/attn/key/kernel`,
`out1/…`), from the artifact's header as the server reads it.

An artifact exported for N devices runs on N devices: the export's mesh rebuilt on them,
each argument placed with the export's own sharding. Inputs are read from an uploaded
.npz (by path or `argN`), and those it leaves out drawn under the job's `input_rules`;
every result is checked against the uploaded reference (whole or sampled), or, on a GPU
or TPU, against the same artifact run on the CPU, and the run reports the worst.

Stored files (the artifact, .npz inputs and reference outputs) live in a content-addressed
directory: the agent fetches them from the server before the job reaches the runner, and
`boundary run` puts local files there itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from workers.catalog import CatalogError
from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import WorkloadParams
from workers.catalog.exported import STAND_IN_TOO_BIG, ExportedParams
from workers.catalog.target_rules import check_target_platforms, placement_on
from workers.compiler.analysis import memory_analysis
from workers.export.meshes import MeshError, argument_shardings, flat_call
from workers.export.rules import (
    InputRuleError,
    InputsError,
    generate,
    given_arguments,
    resolve_rules,
)
from workers.export.samples import ReferenceError, as_dtype, dtype_name, expected
from workers.export.trees import shape_dtype_struct
from workers.files import FileCache
from workers.measure.correctness import check_results
from workers.protocol import Correctness, MemoryAnalysis, PathId, Target
from workers.protocol.memory import program_peak
from workers.protocol.sizes import byte_text
from workers.workloads.artifact import (
    Loaded,
    check_artifact,
    deserialize,
    load_npz,
    recall,
    remember,
)
from workers.workloads.base import HostArray, InputSpec, JaxFunction, Workload


def _load(params: ExportedParams) -> Loaded:
    found = recall(params.artifact)
    if found is None:
        raise KeyError(f"artifact {params.artifact[:12]}… has not been bound to a job")
    return found


class ExportedFunction(Workload[ExportedParams]):
    """A deserialized artifact. `bind` readies one job's files; the rest follows them."""

    name = "exported"
    params_type = ExportedParams
    counts_from_xla = True
    """Its FLOPs are unknown analytically: the engine takes XLA's cost analysis instead."""
    tags_sources = True
    """Its compiled HLO keeps no source positions: the compile tags its ops first
    (workers.compiler.source_tags)."""

    def __init__(
        self,
        path: PathId | None = None,
        files: FileCache | None = None,
        max_bytes: int = 2 * 1024**3,
    ) -> None:
        self.path = path
        self.files = files or FileCache()
        self.max_bytes = max_bytes

    def bind(
        self,
        params: WorkloadParams,
        path: PathId,
        files_dir: Path | None = None,
        max_bytes: int = 2 * 1024**3,
        *,
        target: Target | None = None,
    ) -> ExportedFunction:
        """This workload readied for one job: its artifact loaded and checked for `path`
        (and `target`: its platform, enough devices), its input rules and reference
        checked against the artifact's names."""
        p = self.typed(params)
        files = FileCache(files_dir)  # None: $BOUNDARY_FILES_DIR or ~/.cache/boundary/files
        loaded = recall(p.artifact) or deserialize(files.get(p.artifact, "params.artifact"))
        if target is not None:  # refused naming the target, before the path's own check
            header = loaded.header
            check_target_platforms(target, header.platforms, header.nr_devices)
        check_artifact(loaded, path, max_bytes, p.dims)
        remember(p.artifact, loaded)
        bound = ExportedFunction(path, files, max_bytes)
        try:
            resolve_rules(p.input_rules or {}, bound.input_specs(p))
        except InputRuleError as exc:
            raise CatalogError(str(exc), exc.field) from None
        if p.reference is not None:
            bound.expected(p)  # refused now, naming the result, rather than after the compile
        return bound

    # --- names, shapes and devices -----------------------------------------------------------

    def input_specs(self, params: ExportedParams) -> list[InputSpec]:
        header = _load(params).header
        dims = params.dims
        return [InputSpec(name, tuple(a.dims(dims)), a.dtype) for name, a in header.arguments()]

    def result_specs(self, params: ExportedParams) -> list[InputSpec]:
        """Every flat result: its path name, shape and dtype."""
        header = _load(params).header
        dims = params.dims
        return [InputSpec(name, tuple(a.dims(dims)), a.dtype) for name, a in header.results()]

    def devices_spanned(self, params: ExportedParams) -> int:
        """The devices the artifact was exported for: one run spans that many."""
        return int(_load(params).exp.nr_devices)

    def on_target(self, params: ExportedParams, target: Target) -> str:
        """Which of `target`'s devices the artifact is compiled on (CatalogError naming the
        target when it was exported for another platform or more devices)."""
        header = _load(params).header
        check_target_platforms(target, header.platforms, header.nr_devices)
        return placement_on(target, header.nr_devices)

    def shardings(self, params: ExportedParams, devices: Sequence[Any]) -> list[Any]:
        """Each flat argument's sharding on `devices`, as the export placed it."""
        try:
            return argument_shardings(_load(params).exp, devices)
        except MeshError as exc:
            raise CatalogError(f"params.artifact: {exc}", "params.artifact") from None

    # --- inputs, function, results -------------------------------------------------------------

    def make_inputs(self, params: ExportedParams, rng: np.random.Generator) -> list[HostArray]:
        """The uploaded inputs' arrays, and the arguments they leave out drawn under the
        input rules (`workers.export.rules.generate`, as export-fn draws them)."""
        specs = self.input_specs(params)
        given = {} if params.inputs is None else self._given(params, specs)
        try:
            return generate(specs, params.input_rules, params.seed, given)
        except InputRuleError as exc:
            raise CatalogError(str(exc), exc.field) from None

    def _given(self, params: ExportedParams, specs: list[InputSpec]) -> dict[str, HostArray]:
        """The arguments the inputs file gives, by name, each checked against its argument."""
        assert params.inputs is not None
        stored = self.files.checked(params.inputs, "params.inputs")
        arrays = load_npz(stored, "params.inputs", self.max_bytes)
        try:
            members = given_arguments(specs, list(arrays))
        except InputsError as exc:
            raise CatalogError(str(exc), exc.field) from None
        given: dict[str, HostArray] = {}
        for spec in specs:
            if spec.name not in members:
                continue
            found = arrays[members[spec.name]]
            if tuple(found.shape) != spec.shape or dtype_name(found.dtype) != spec.dtype:
                raise CatalogError(
                    f"params.inputs: {spec.name} is {dtype_name(found.dtype)}"
                    f"{list(found.shape)}, the function takes {spec.dtype}{list(spec.shape)}",
                    "params.inputs",
                )
            given[spec.name] = as_dtype(found, spec.dtype)
        return given

    def function(self, params: ExportedParams) -> JaxFunction:
        call: JaxFunction = flat_call(_load(params).exp)
        return call

    def expected(self, params: ExportedParams) -> dict[int, tuple[Any | None, Any]]:
        """The uploaded reference per result position: (indices or None, values)."""
        assert params.reference is not None
        stored = self.files.checked(params.reference, "params.reference")
        arrays = load_npz(stored, "params.reference", self.max_bytes)
        try:
            return expected(arrays, self.result_specs(params))
        except ReferenceError as exc:
            raise CatalogError(f"params.reference: {exc}", "params.reference") from None

    def reference(self, params: ExportedParams, inputs: Sequence[HostArray]) -> HostArray:
        raise ValueError("an exported function is judged result by result (see judge)")

    def _on_cpu(
        self, params: ExportedParams, inputs: Sequence[HostArray], held: int
    ) -> dict[int, tuple[Any | None, Any]] | str:
        """Every result of the same artifact run on this process's CPU devices, or why it
        cannot stand in: the jax-cpu path itself, no CPU lowering, too few CPU devices, or
        too little host memory. The CPU program is compiled from the inputs' shapes before
        anything is placed, and runs only when its peak (memory_analysis() by the CPU rule,
        on each of its devices, all in the host's memory) and the `held` bytes the run
        already keeps on the host fit within the worker's job limit. On a TPU v5e, a
        training step at 15 GB of its HBM reports 82 GB of temporaries on the CPU."""
        exp = _load(params).exp
        cpus = jax.devices("cpu")
        if self.path in (None, PathId.JAX_CPU):
            return "on the jax-cpu path a CPU run would only repeat this run"
        devices = int(exp.nr_devices)
        if "cpu" not in exp.platforms or len(cpus) < devices:
            return "no CPU run could stand in (not exported for CPU, or too few CPU devices)"
        shardings = argument_shardings(exp, cpus)
        shapes = [
            shape_dtype_struct(np.shape(x), np.asarray(x).dtype, sharding=s)
            for x, s in zip(inputs, shardings, strict=True)
        ]
        compiled = jax.jit(flat_call(exp)).lower(*shapes).compile()
        too_big = self._too_big(memory_analysis(compiled), devices, held)
        if too_big is not None:
            return too_big
        placed = [jax.device_put(x, s) for x, s in zip(inputs, shardings, strict=True)]
        results = compiled(*placed)
        return {i: (None, np.asarray(r)) for i, r in enumerate(results)}

    def _too_big(self, analysis: MemoryAnalysis | None, devices: int, held: int) -> str | None:
        """Why the CPU stand-in may not run in this worker's memory, or None when it may."""
        limit = f"the worker's job limit of {byte_text(self.max_bytes, exact=True)}"
        peak = None
        if analysis is not None:
            peak = program_peak("cpu", peak=analysis.peak_bytes, temp=analysis.temp_bytes)
        if peak is None:
            return f"{STAND_IN_TOO_BIG} memory its compile did not report, so it was not run"
        need = peak * devices
        if need + held <= self.max_bytes:
            return None
        spread = f", on {devices} devices" if devices > 1 else ""
        return (
            f"{STAND_IN_TOO_BIG} {byte_text(need, exact=True)} of host memory (its CPU "
            f"compile's memory analysis{spread}) beside the {byte_text(held, exact=True)} "
            f"this run holds on the host, over {limit} (BOUNDARY_MAX_JOB_BYTES)"
        )

    def judge(
        self,
        params: ExportedParams,
        inputs: Sequence[HostArray],
        output: Any,
        *,
        arithmetic: Arithmetic | None = None,
    ) -> Correctness:
        """Every result checked against its reference, each allowing for the `arithmetic`
        the program's float32 products ran at (unless the job asks for `strict`); the
        verdict names the worst."""
        results = [np.asarray(r) for r in output] if isinstance(output, list | tuple) else [output]
        specs = self.result_specs(params)
        names = [s.name for s in specs]
        tolerances = [params.result_tolerance(s.dtype, arithmetic) for s in specs]
        if params.reference is not None:
            found = self.expected(params)
            label = "uploaded reference outputs"
            if any(indices is not None for indices, _ in found.values()):
                label = "an uploaded sample of the reference outputs"
            return check_results(names, results, found, tolerances, reference=label)
        held = sum(np.asarray(x).nbytes for x in inputs) + sum(r.nbytes for r in results)
        stand_in = self._on_cpu(params, inputs, held)
        if not isinstance(stand_in, str):
            kinds = sorted({r.dtype.name for _, r in stand_in.values()})
            label = f"the same artifact on the CPU, in {', '.join(kinds)}"
            return check_results(names, results, stand_in, tolerances, reference=label)
        why_none = f"no reference outputs were uploaded, and {stand_in}"
        return check_results(names, results, {}, tolerances, reference="none", why_none=why_none)

    # --- counts --------------------------------------------------------------------------------

    def flop_count(self, params: ExportedParams) -> float:
        return 0.0  # unknown analytically (the catalog's is None); see counts_from_xla

    def byte_count(self, params: ExportedParams) -> float:
        header = _load(params).header  # its symbolic dimensions at the job's values
        return float(sum(a.nbytes(params.dims) for a in (*header.in_avals, *header.out_avals)))

    def tolerance(self, params: ExportedParams, arithmetic: Arithmetic | None = None) -> float:
        # The catalog's only when the job declares one; else its first result's dtype's.
        specs = self.result_specs(params)
        return params.result_tolerance(specs[0].dtype if specs else "float32", arithmetic)
