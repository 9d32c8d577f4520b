"""An uploaded artifact on the worker: deserialized, refused when it must not or cannot
run here, and its .npz files read within the job's byte cap.

A worker runs no Python of the user's: an artifact is StableHLO plus its calling
convention. It still refuses, naming `params.artifact`, what it must not run (a custom
call outside the targets jax itself guarantees, which would be native code run on the
user's word) and what it cannot (another platform, symbolic shapes, a dtype it cannot
generate or check, more bytes than the job's cap).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from workers.catalog import CatalogError
from workers.catalog.exported import JAX_PLATFORM
from workers.catalog.npz import NpzError, read_npz
from workers.catalog.peak import dense_peak, refusal
from workers.export.dims import dims_problem
from workers.export.flatbuffer import ArtifactError
from workers.export.header import DTYPES, ExportHeader, read_header
from workers.protocol import PathId

_REFUSED_TARGETS = frozenset({"tf.call_tf_function"})  # calls back into TensorFlow's Python

_COMPILED_BY_XLA = frozenset({"__gpu$xla.gpu.triton"})
"""Kernels XLA itself compiles from the IR the call carries (Pallas on GPU through Triton),
like `tpu_custom_call` (Mosaic) and `mosaic_gpu_v2`, which jax lists as stable: no native
code of the user's runs."""

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
    """Custom-call targets an artifact may use: those jax guarantees stable across releases,
    and the kernels XLA compiles itself.

    jax keeps that list privately; if a release moves it, a short copy of the usual ones
    (LAPACK, cuSOLVER, sharding markers, Pallas/Mosaic kernels) stands in.
    """
    try:
        from jax._src.export import _export

        stable = frozenset(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)
    except (ImportError, AttributeError):
        stable = _FALLBACK_STABLE
    return (stable | _COMPILED_BY_XLA) - _REFUSED_TARGETS


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


@dataclass
class Loaded:
    """A deserialized artifact and its header (names included), as every side reads it."""

    exp: Any
    header: ExportHeader
    _custom_calls: list[str] | None = None

    def custom_calls(self) -> list[str]:
        """The custom-call targets its StableHLO names (read once: printing the module
        costs more than the rest of a job's checks)."""
        if self._custom_calls is None:
            self._custom_calls = custom_call_targets(self.exp.mlir_module())
        return self._custom_calls


_loaded: OrderedDict[str, Loaded] = OrderedDict()
"""Deserialized artifacts by digest (content-addressed, so never stale), newest last."""


def deserialize(data: bytes, field: str = "params.artifact") -> Loaded:
    """An artifact from bytes; CatalogError naming `field` if they are not one."""
    try:
        header = read_header(data)
        exp = jax.export.deserialize(bytearray(data))
    except Exception as exc:  # noqa: BLE001 - any failure to parse means a bad artifact
        reason = f"{type(exc).__name__}: {exc}"[:300]
        raise CatalogError(
            f"{field}: not a readable jax.export artifact (corrupted?): {reason}", field
        ) from None
    return Loaded(exp, header)


def remember(sha256: str, loaded: Loaded) -> None:
    """Keep `loaded` under its digest for the job that bound it (a few at most)."""
    _loaded[sha256] = loaded
    _loaded.move_to_end(sha256)
    while len(_loaded) > _MAX_LOADED:
        _loaded.popitem(last=False)


def recall(sha256: str) -> Loaded | None:
    """The artifact kept under `sha256`, if any."""
    return _loaded.get(sha256)


def dtype_name(aval: Any) -> str:
    return str(np.dtype(aval.dtype).name) if hasattr(aval.dtype, "itemsize") else str(aval.dtype)


def check_artifact(
    loaded: Loaded, path: PathId, max_bytes: int, dims: Mapping[str, int] | None = None
) -> None:
    """Refuse, naming params.artifact (or params.dims), what this worker must not or cannot
    run, its symbolic dimensions at `dims`."""
    field = "params.artifact"
    exp, header = loaded.exp, loaded.header
    wanted = JAX_PLATFORM[path]
    platforms = [str(p).lower() for p in exp.platforms]
    if wanted not in platforms:
        raise CatalogError(
            f"{field}: exported for {', '.join(platforms)} only; path {path.value} runs on "
            f"{wanted} (export it again with --platforms {','.join([*platforms, wanted])})",
            field,
        )
    problem = dims_problem(header.dimensions(), dims or {})
    if problem is not None:
        raise CatalogError(f"{problem[0]}: {problem[1]}", problem[0])
    for aval in exp.in_avals + exp.out_avals:
        if dtype_name(aval) not in DTYPES[:15]:
            raise CatalogError(f"{field}: dtype {aval.dtype} cannot be generated or checked", field)
    # What a run holds at its peak (workers.catalog.peak), as the server estimated it.
    try:
        inputs = sum(a.nbytes(dims) for a in header.in_avals)
        outputs = sum(a.nbytes(dims) for a in header.out_avals)
    except ArtifactError as exc:
        raise CatalogError(f"params.dims: {exc}", "params.dims") from None
    itemsize = max((int(np.dtype(a.dtype).itemsize) for a in exp.out_avals), default=4)
    refusal_text = refusal(dense_peak(inputs, outputs, itemsize), max_bytes)
    if refusal_text is not None:
        raise CatalogError(f"{field}: {refusal_text.removeprefix('params: ')}", field)
    refused = refused_targets(loaded.custom_calls())
    if refused:
        raise CatalogError(
            f"{field}: refused: it calls custom call target(s) this worker does not know: "
            f"{', '.join(refused)}",
            field,
        )


def load_npz(path: Path, field: str, max_bytes: int) -> dict[str, Any]:
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
