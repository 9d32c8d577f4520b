"""What `boundary export-fn` does beside the export itself: the artifact run on this
machine's CPU on the inputs a worker generates for it (for `--save-inputs`,
`--save-output` and `--save-output-sample`), and what it writes. Light, like the export:
NumPy and the model's own jax."""

from __future__ import annotations

import argparse
import hashlib
import io
from pathlib import Path
from typing import Any


def npz_bytes(arrays: dict[str, Any]) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def run_here(
    data: bytes, rules: dict[str, Any] | None, seed: int, dims: dict[str, int] | None = None
) -> tuple[list[Any], list[Any]]:
    """(inputs, results): the artifact run on this machine's CPU devices, on the inputs a
    worker generates for it (its symbolic dimensions at `dims`, the example's). A reference
    for other paths, not an independent check."""
    import jax
    import numpy as np

    from workers.export.header import read_header
    from workers.export.meshes import argument_shardings, flat_call
    from workers.export.rules import ArgumentSpec, generate

    header = read_header(data)
    exp = jax.export.deserialize(bytearray(data))
    specs = [ArgumentSpec(n, tuple(a.dims(dims)), a.dtype) for n, a in header.arguments()]
    inputs = generate(specs, rules, seed)
    shardings = argument_shardings(exp, jax.devices("cpu"))
    placed = [jax.device_put(x, s) for x, s in zip(inputs, shardings, strict=True)]
    results = jax.jit(flat_call(exp))(*placed)
    return inputs, [np.asarray(r) for r in results]


def save_runs(
    args: argparse.Namespace,
    output: Path,
    *,
    header: Any,
    inputs: list[Any],
    results: list[Any],
    summary: dict[str, Any],
) -> bytes | None:
    """Write what was asked of the run here; the sample's bytes when one was written."""
    from workers.export.samples import write_sample

    files: list[tuple[str, Path, bytes]] = []
    if args.save_inputs:
        named = dict(zip(header.argument_names, inputs, strict=True))
        files.append(("inputs", args.save_inputs, npz_bytes(named)))
    if args.save_output:
        flat = {f"out{i}": r for i, r in enumerate(results)}
        files.append(("output", args.save_output, npz_bytes(flat)))
    sample = None
    if args.save_output_sample is not None:
        sample = write_sample(results, args.save_output_sample, args.seed)
        where = args.sample_file or output.with_suffix(".sample.npz")
        files.append(("sample", where, sample))
    for key, path, blob in files:
        path.write_bytes(blob)
        summary[key] = {"file": str(path), "sha256": hashlib.sha256(blob).hexdigest()}
    return sample
