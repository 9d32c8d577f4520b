"""`exported` on JAX: a deserialized `jax.export.Exported`, run like a catalog workload.

Nothing of the user's Python runs here: the artifact is StableHLO plus its calling
convention, deserialized with `jax.export.deserialize` and called through `jax.jit`,
so trace → lower → compile → execute are the same stages every workload goes through.
Before anything compiles, the artifact is checked: exported for this path's platform, for
one device, with concrete shapes, one result, and no custom call outside the targets jax
itself guarantees (a custom call is native code the worker would run on the user's word).

Stored files (the artifact, .npz inputs and reference outputs) live in a content-addressed
directory: the agent fetches them from the server before the job reaches the runner, and
`boundary run` puts local files there itself.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from workers.catalog import CatalogError
from workers.catalog.base import WorkloadParams
from workers.catalog.exported import JAX_PLATFORM, ExportedParams
from workers.catalog.jaxexport import DTYPES
from workers.catalog.npz import NpzError, read_npz
from workers.catalog.peak import dense_peak, refusal
from workers.files import FileCache
from workers.measure.correctness import check_output, unchecked
from workers.protocol import Correctness, PathId
from workers.workloads.base import HostArray, InputSpec, JaxFunction, Workload

DEFAULT_TOLERANCE: dict[str, float] = {
    "float64": 1e-12,
    "complex128": 1e-12,
    "float32": 1e-4,
    "complex64": 1e-4,
    "float16": 5e-3,
    "bfloat16": 2e-2,
}
"""Relative error allowed when the job declares no tolerance, by the result's dtype.

Looser than a catalog workload's own bounds because the function is unknown: float32
allows for a GPU's TF32 contractions; integers and booleans must match exactly (0)."""

_REFUSED_TARGETS = frozenset({"tf.call_tf_function"})  # calls back into TensorFlow's Python

_FALLBACK_STABLE = frozenset(
    {
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "annotate_device_placement",
        "shape_assertion",
        "AllocateBuffer",
        "tpu_custom_call",
        "mosaic_gpu_v2",
    }
)
_FALLBACK_PATTERN = re.compile(r"^(lapack_\w+_ffi|cusolver_\w+_ffi|cu_\w+|cusparse_\w+_ffi)$")

_TARGET = re.compile(r'stablehlo\.custom_call\s+@([\w.$-]+)|call_target_name\s*=\s*"([^"]+)"')

_MAX_LOADED = 8


def known_targets() -> frozenset[str]:
    """Custom-call targets an artifact may use: those jax guarantees stable across releases.

    jax keeps that list privately; if a release moves it, a short copy of the usual ones
    (LAPACK, cuSOLVER, sharding markers, Pallas/Mosaic kernels) stands in.
    """
    try:
        from jax._src.export import _export

        stable = frozenset(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)
    except (ImportError, AttributeError):
        stable = _FALLBACK_STABLE
    return stable - _REFUSED_TARGETS


def custom_call_targets(module_text: str) -> list[str]:
    """Every distinct custom-call target named in StableHLO text, in order of appearance."""
    found: list[str] = []
    for match in _TARGET.finditer(module_text):
        name = match.group(1) or match.group(2)
        if name not in found:
            found.append(name)
    return found


def refused_targets(targets: Sequence[str]) -> list[str]:
    """The targets among `targets` this worker will not run."""
    allowed = known_targets()
    return [
        t
        for t in targets
        if t in _REFUSED_TARGETS or (t not in allowed and not _FALLBACK_PATTERN.match(t))
    ]


_loaded: OrderedDict[str, Any] = OrderedDict()
"""Deserialized artifacts by digest (content-addressed, so never stale), newest last."""


def deserialize(data: bytes, field: str = "params.artifact") -> Any:
    """A jax.export.Exported from bytes; CatalogError naming `field` if they are not one."""
    try:
        return jax.export.deserialize(bytearray(data))
    except Exception as exc:  # noqa: BLE001 - any failure to parse means a bad artifact
        reason = f"{type(exc).__name__}: {exc}"[:300]
        raise CatalogError(
            f"{field}: not a readable jax.export artifact (corrupted?): {reason}", field
        ) from None


def _load(sha256: str) -> Any:
    exp = _loaded.get(sha256)
    if exp is None:
        raise KeyError(f"artifact {sha256[:12]}… has not been bound to a job")
    return exp


def _dtype_name(aval: Any) -> str:
    return str(np.dtype(aval.dtype).name) if hasattr(aval.dtype, "itemsize") else str(aval.dtype)


def _check(exp: Any, path: PathId, max_bytes: int) -> None:
    """Refuse, naming params.artifact, what this worker must not or cannot run."""
    field = "params.artifact"
    wanted = JAX_PLATFORM[path]
    platforms = [str(p).lower() for p in exp.platforms]
    if wanted not in platforms:
        raise CatalogError(
            f"{field}: exported for {', '.join(platforms)} only; path {path.value} runs on "
            f"{wanted} (export it with --platforms {wanted})",
            field,
        )
    if exp.nr_devices != 1:
        raise CatalogError(
            f"{field}: exported for {exp.nr_devices} devices; exported functions run on one",
            field,
        )
    avals = [*exp.in_avals, *exp.out_avals]
    for aval in avals:
        if not all(isinstance(d, int) for d in aval.shape):
            raise CatalogError(
                f"{field}: shape {aval.str_short()} is symbolic; export with concrete shapes",
                field,
            )
        if _dtype_name(aval) not in DTYPES[:15]:
            raise CatalogError(f"{field}: dtype {aval.dtype} cannot be generated or checked", field)
    if len(exp.out_avals) != 1:
        raise CatalogError(
            f"{field}: the function returns {len(exp.out_avals)} arrays; the bench times "
            "functions that return exactly one (stack or concatenate the results)",
            field,
        )

    def nbytes(aval: Any) -> int:
        return int(np.prod(aval.shape, dtype=np.int64)) * int(np.dtype(aval.dtype).itemsize)

    output = exp.out_avals[0]
    peak = dense_peak(
        sum(nbytes(a) for a in exp.in_avals), nbytes(output), int(np.dtype(output.dtype).itemsize)
    )
    problem = refusal(peak, max_bytes)
    if problem is not None:
        raise CatalogError(f"{field}: {problem.removeprefix('params: ')}", field)
    refused = refused_targets(custom_call_targets(exp.mlir_module()))
    if refused:
        raise CatalogError(
            f"{field}: refused: it calls custom call target(s) this worker does not know: "
            f"{', '.join(refused)}",
            field,
        )


def _npz(path: Path, field: str, max_bytes: int) -> dict[str, HostArray]:
    """The arrays of an .npz archive on disk, checked from their headers first (see
    workers.catalog.npz: names matched whole, no negative or overflowing dimension, each
    member holding the bytes it declares, all of them within `max_bytes`), so nothing is
    decompressed that would pass the job's cap (a small compressed file can declare
    gigabytes of zeros)."""
    try:
        with open(path, "rb") as handle:
            read_npz(handle, max_bytes)
        with np.load(path, allow_pickle=False) as archive:
            return {name: np.asarray(archive[name]) for name in archive.files}
    except NpzError as exc:
        raise CatalogError(f"{field}: {exc}", field) from None
    except (OSError, ValueError, EOFError) as exc:
        raise CatalogError(f"{field}: not a readable .npz archive ({exc})"[:300], field) from None


def _pick(arrays: dict[str, HostArray], prefix: str, index: int) -> HostArray | None:
    for key in (f"{prefix}{index}", f"arr_{index}"):
        if key in arrays:
            return arrays[key]
    return None


class ExportedFunction(Workload[ExportedParams]):
    """A deserialized artifact. `bind` readies one job's files; the rest follows them."""

    name = "exported"
    params_type = ExportedParams
    counts_from_xla = True
    """Its FLOPs are unknown analytically: the engine takes XLA's cost analysis instead."""

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
    ) -> ExportedFunction:
        """This workload readied for one job: its artifact loaded, checked for `path`."""
        p = self.typed(params)
        files = FileCache(files_dir)  # None: $BOUNDARY_FILES_DIR or ~/.cache/boundary/files
        exp = _loaded.get(p.artifact)
        if exp is None:
            exp = deserialize(files.get(p.artifact, "params.artifact"))
        _check(exp, path, max_bytes)
        _loaded[p.artifact] = exp
        _loaded.move_to_end(p.artifact)
        while len(_loaded) > _MAX_LOADED:
            _loaded.popitem(last=False)
        return ExportedFunction(path, files, max_bytes)

    def input_specs(self, params: ExportedParams) -> list[InputSpec]:
        exp = _load(params.artifact)
        return [
            InputSpec(f"arg{i}", tuple(int(d) for d in a.shape), _dtype_name(a))
            for i, a in enumerate(exp.in_avals)
        ]

    def make_inputs(self, params: ExportedParams, rng: np.random.Generator) -> list[HostArray]:
        specs = self.input_specs(params)
        if params.inputs is None:
            return seeded_inputs(specs, params.seed)
        stored = self.files.checked(params.inputs, "params.inputs")
        arrays = _npz(stored, "params.inputs", self.max_bytes)
        out = []
        for i, spec in enumerate(specs):
            given = _pick(arrays, "arg", i)
            if given is None:
                raise CatalogError(f"params.inputs: no array arg{i} (or arr_{i})", "params.inputs")
            if tuple(given.shape) != spec.shape or given.dtype != jnp.dtype(spec.dtype):
                raise CatalogError(
                    f"params.inputs: arg{i} is {given.dtype}{list(given.shape)}, the function "
                    f"takes {spec.dtype}{list(spec.shape)}",
                    "params.inputs",
                )
            out.append(given)
        return out

    def function(self, params: ExportedParams) -> JaxFunction:
        call: JaxFunction = _load(params.artifact).call
        return call

    def reference(self, params: ExportedParams, inputs: Sequence[HostArray]) -> HostArray:
        found = self._reference(params, inputs)
        if found is None:
            raise ValueError("this run has no reference to check against")
        return found[0]

    def _reference(
        self, params: ExportedParams, inputs: Sequence[HostArray]
    ) -> tuple[HostArray, str] | None:
        """The expected output and what it is, or None when there is nothing to compare."""
        if params.reference is not None:
            stored = self.files.checked(params.reference, "params.reference")
            arrays = _npz(stored, "params.reference", self.max_bytes)
            expected = _pick(arrays, "out", 0)
            if expected is None:
                raise CatalogError("params.reference: no array out0 (or arr_0)", "params.reference")
            return expected, "uploaded reference outputs"
        exp = _load(params.artifact)
        if self.path not in (None, PathId.JAX_CPU) and "cpu" in exp.platforms:
            cpu = jax.devices("cpu")[0]
            placed = jax.device_put(list(inputs), cpu)
            result = np.asarray(jax.jit(exp.call)(*placed))
            # The stand-in runs in the artifact's own dtypes, not float64: say which.
            return result, f"the same artifact on the CPU, in {result.dtype.name}"
        return None

    def judge(
        self, params: ExportedParams, inputs: Sequence[HostArray], output: HostArray
    ) -> Correctness:
        """The output checked against its reference, or said plainly to be unchecked."""
        tolerance = self.tolerance(params)
        found = self._reference(params, inputs)
        if found is None:
            why = (
                "on the jax-cpu path a CPU run would only repeat this run"
                if self.path in (None, PathId.JAX_CPU)
                else "it was not exported for CPU, so no CPU run could stand in"
            )
            return unchecked(output, tolerance, f"no reference outputs were uploaded, and {why}")
        expected, label = found
        verdict = check_output(output, expected, tolerance)
        return verdict.model_copy(update={"reference": label})

    def flop_count(self, params: ExportedParams) -> float:
        return 0.0  # unknown analytically; see counts_from_xla

    def byte_count(self, params: ExportedParams) -> float:
        exp = _load(params.artifact)
        avals = [*exp.in_avals, *exp.out_avals]
        return float(sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in avals))

    def tolerance(self, params: ExportedParams) -> float:
        if params.tolerance is not None:
            return params.tolerance
        dtype = _dtype_name(_load(params.artifact).out_avals[0])
        return DEFAULT_TOLERANCE.get(dtype, 0.0)


def seeded_inputs(specs: Sequence[InputSpec], seed: int) -> list[HostArray]:
    """The inputs a worker generates for an artifact: the same for the same seed anywhere."""
    rng = np.random.default_rng(seed)
    return [_random(spec, rng) for spec in specs]


def _random(spec: InputSpec, rng: np.random.Generator) -> HostArray:
    """Seeded values of the spec's dtype: standard normal for floats, small integers else."""
    dtype = jnp.dtype(spec.dtype)
    if dtype == np.bool_:
        return rng.random(spec.shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -8
        return rng.integers(low, 8, size=spec.shape).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        real = rng.standard_normal(spec.shape) + 1j * rng.standard_normal(spec.shape)
        return real.astype(dtype)
    return rng.standard_normal(spec.shape, dtype=np.float32).astype(dtype)
