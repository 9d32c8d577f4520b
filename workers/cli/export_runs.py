"""What `boundary export-fn` does beside the export itself: the run's inputs (the
example's own arrays, written beside the artifact as FUNCTION.inputs.npz, and the rest
drawn as a worker draws them), the artifact run on this machine's CPU on those inputs
(for `--save-inputs`, `--save-output` and `--save-output-sample`), and what it writes.
Light, like the export: NumPy and the model's own jax."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any


def finish(args: argparse.Namespace, made: Any, rules: dict[str, Any] | None) -> bool:
    """The artifact written, then its inputs, the run here and the upload, and the summary
    printed; False when the server refused something. InputRuleError for a rule that
    cannot apply to the inputs drawn."""
    output = args.output or Path(f"{made.header.function_name}.jaxexport")
    output.write_bytes(made.data)
    summary = _summary(output, made.data, made.header)
    summary["sources"] = None  # --no-source: none written, none sent
    sources = None if args.no_source else _write_sources(made, output, summary)
    sample: bytes | None = None
    given = example_inputs(args, made, output, summary, rules)
    if args.save_inputs or args.save_output or args.save_output_sample is not None:
        inputs, results = run_here(made.data, rules, args.seed, made.dims, given)
        sample = save_runs(
            args, output, header=made.header, inputs=inputs, results=results, summary=summary
        )
    if made.dims:  # the example's value of each symbolic dimension: its runs take one each
        summary["dims"] = made.dims
        args.dims = made.dims
    if args.upload:
        from workers.cli.export_upload import upload_noted

        inputs_file = summary["run_inputs"]["file"]
        if not upload_noted(
            args,
            made.data,
            summary,
            sources=sources,
            sample=sample,
            rules=rules,
            inputs=Path(inputs_file) if inputs_file else None,
        ):
            return False
    print(json.dumps(summary, indent=2))
    return True


def _write_sources(made: Any, output: Path, summary: dict[str, Any]) -> bytes | None:
    """The sources document of the exported program, written beside the artifact
    (FUNCTION.sources.json) and noted in the summary; None (with a warning) when its
    lines cannot be gathered, which never fails the export."""
    from workers.export.sources import parse_sources, sources_document

    try:
        document = sources_document(made.exported.mlir_module(), summary["sha256"])
    except Exception as exc:  # noqa: BLE001 - reading the user's files may fail in any way
        print(f"boundary export-fn: no source lines: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    where = output.with_suffix(".sources.json")
    where.write_bytes(document)
    sent = parse_sources(document).summary()
    summary["sources"] = {
        "file": str(where),
        "sha256": hashlib.sha256(document).hexdigest(),
        "files": sent["files"],
        "lines": sent["lines"],
        "cut": sent["cut"],
    }
    return document


def _summary(output: Path, data: bytes, header: Any) -> dict[str, Any]:
    names = list(header.result_names)
    return {
        "file": str(output),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "function_name": header.function_name,
        "platforms": list(header.platforms),
        "nr_devices": header.nr_devices,
        "meshes": [m.text() for m in header.meshes()],
        "in_avals": [a.text() for a in header.in_avals],
        "out_avals": [a.text() for a in header.out_avals],
        "arguments": list(header.argument_names),
        "results": names,
    }


def npz_bytes(arrays: dict[str, Any]) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def example_inputs(
    args: argparse.Namespace,
    made: Any,
    output: Path,
    summary: dict[str, Any],
    rules: dict[str, Any] | None,
) -> dict[str, Any]:
    """The arguments the example gives as arrays (none with `--generated-inputs`), by
    name: written beside the artifact as FUNCTION.inputs.npz when there are any, and the
    summary's `run_inputs` says which inputs the runs use. InputRuleError for an input
    rule that names only given arguments."""
    from workers.export.rules import ArgumentSpec, resolve_drawn

    given: dict[str, Any] = {} if args.generated_inputs else made.given()
    header = made.header
    specs = [ArgumentSpec(n, tuple(a.dims(made.dims)), a.dtype) for n, a in header.arguments()]
    resolve_drawn(rules or {}, specs, given.keys())
    drawn = [s.name for s in specs if s.name not in given]
    noted: dict[str, Any] = {"example": list(given), "drawn": drawn, "file": None}
    if given:
        where = output.with_suffix(".inputs.npz")
        with where.open("wb") as handle:  # straight to disk: real weights may be large
            _save(handle, given)
        noted["file"] = str(where)
        noted["bytes"] = where.stat().st_size
        noted["sha256"] = file_sha256(where)
    noted["says"] = _says(len(given), len(drawn), args, noted["file"], ruled=bool(rules))
    summary["run_inputs"] = noted
    return given


def _says(
    given: int, drawn: int, args: argparse.Namespace, file: str | None, *, ruled: bool
) -> str:
    """Which inputs the runs use, in a sentence."""
    parts = []
    if given:
        s = "" if given == 1 else "s"
        parts.append(f"the example's own values for {given} argument{s} ({file})")
    if drawn:
        how = "under --input-rules" if ruled else "by the default draw"
        s = "" if drawn == 1 else "s"
        parts.append(f"{drawn} argument{s} drawn from seed {args.seed} {how}")
    if args.generated_inputs:
        parts.append("(--generated-inputs: the example gave shapes only)")
    return "the runs use " + " and ".join(parts) if parts else "the function takes no arguments"


def _save(handle: Any, arrays: dict[str, Any]) -> None:
    import numpy as np

    np.savez(handle, **arrays)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def run_here(
    data: bytes,
    rules: dict[str, Any] | None,
    seed: int,
    dims: dict[str, int] | None = None,
    given: dict[str, Any] | None = None,
) -> tuple[list[Any], list[Any]]:
    """(inputs, results): the artifact run on this machine's CPU devices, on the inputs a
    worker generates for it: `given` as they are, the rest drawn (its symbolic dimensions
    at `dims`, the example's). A reference for other paths, not an independent check."""
    import jax
    import numpy as np

    from workers.export.header import read_header
    from workers.export.meshes import argument_shardings, flat_call
    from workers.export.rules import ArgumentSpec, generate

    header = read_header(data)
    exp = jax.export.deserialize(bytearray(data))
    specs = [ArgumentSpec(n, tuple(a.dims(dims)), a.dtype) for n, a in header.arguments()]
    inputs = generate(specs, rules, seed, given)
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
