"""`boundary export-fn MODULE:FUNCTION --arg float32[1024,1024] … -o fn.jaxexport`.

Runs on the user's own machine, and only there does the user's Python run: the function
is imported, jitted and serialized with `jax.export` (StableHLO plus its calling
convention) for the requested platforms. The artifact is data a worker can compile and
time without any of the user's code. Optionally it also writes the seeded inputs a worker
would generate and the function's output on them, as .npz files to upload with it.

Also here: `resolve_file_params`, which lets `boundary run exported artifact=@fn.jaxexport`
name local files, storing them where a local run reads them or uploading them to a server.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx

from workers.catalog import WORKLOADS
from workers.catalog.jaxexport import DTYPES, ArtifactError, read_header
from workers.files import FileCache

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_EXPORT_FAILED = 3

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
_ARG = re.compile(r"^\s*([a-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*$")


class ExportUsageError(ValueError):
    """The command line does not describe an export; the message names the culprit."""


def parse_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """`float32[1024,1024]` as (dtype, shape); `float32[]` is a scalar."""
    match = _ARG.match(text)
    if match is None:
        raise ExportUsageError(
            f"--arg {text!r}: expected DTYPE[D0,D1,...], e.g. float32[1024,1024]"
        )
    dtype, dims = match.group(1), match.group(2)
    if dtype not in DTYPES[:15]:
        raise ExportUsageError(f"--arg {text!r}: unknown dtype (known: {', '.join(DTYPES[:15])})")
    parts = [d.strip() for d in dims.split(",") if d.strip()]
    shape = tuple(int(d) for d in parts)
    if any(d <= 0 for d in shape):
        raise ExportUsageError(f"--arg {text!r}: every dimension must be at least 1")
    return dtype, shape


def parse_platforms(text: str) -> list[str]:
    """`cpu,cuda,tpu` as a list, each a platform jax.export knows."""
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    for name in names:
        if name not in PLATFORMS:
            raise ExportUsageError(
                f"--platforms: {name!r} is no platform (known: {', '.join(PLATFORMS)})"
            )
    if not names:
        raise ExportUsageError("--platforms: name at least one platform")
    return list(dict.fromkeys(names))


def load_function(target: str) -> Any:
    """The callable named by MODULE:FUNCTION (a dotted module or a .py file)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ExportUsageError(f"{target!r}: expected MODULE:FUNCTION, e.g. mypkg.models:forward")
    if module_name.endswith(".py"):
        spec = importlib.util.spec_from_file_location("_boundary_user_module", module_name)
        if spec is None or spec.loader is None:
            raise ExportUsageError(f"{module_name}: cannot load this file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path:
            sys.path.insert(0, "")  # like `python -m`: modules in the current directory
        module = importlib.import_module(module_name)
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ExportUsageError(f"{target!r}: {module_name} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not callable(found):
        raise ExportUsageError(f"{target!r}: {attribute} is not callable")
    return found


def export_function(
    function: Any, args: list[tuple[str, tuple[int, ...]]], platforms: list[str]
) -> tuple[bytes, Any]:
    """The serialized artifact and the Exported it came from."""
    import jax

    from workers.compiler.jaxtyped import shape_dtype_struct

    structs = [shape_dtype_struct(shape, dtype) for dtype, shape in args]
    exported = jax.export.export(jax.jit(function), platforms=platforms)(*structs)
    return bytes(exported.serialize()), exported


def _npz(arrays: dict[str, Any]) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def sample_files(exported: Any, seed: int) -> tuple[bytes, bytes]:
    """(.npz of the seeded inputs a worker generates, .npz of the output on them here).

    The output comes from running the artifact itself on this machine's CPU, so it is a
    reference for other paths, not an independent check of the function.
    """
    import jax
    import numpy as np

    from workers.workloads.base import InputSpec
    from workers.workloads.exported import seeded_inputs

    specs = [
        InputSpec(f"arg{i}", tuple(int(d) for d in a.shape), np.dtype(a.dtype).name)
        for i, a in enumerate(exported.in_avals)
    ]
    inputs = seeded_inputs(specs, seed)
    cpu = jax.devices("cpu")[0]
    output = np.asarray(jax.jit(exported.call)(*jax.device_put(inputs, cpu)))
    named = {f"arg{i}": value for i, value in enumerate(inputs)}
    return _npz(named), _npz({"out0": output})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boundary export-fn",
        description="Serialize a JAX function with jax.export, to run on a Boundary worker.",
    )
    parser.add_argument("target", metavar="MODULE:FUNCTION")
    parser.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="DTYPE[SHAPE]",
        help="one per argument, in order, e.g. float32[1024,1024]",
    )
    parser.add_argument(
        "--platforms", default="cpu,cuda,tpu", help="comma list (default: cpu,cuda,tpu)"
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .jaxexport file")
    parser.add_argument(
        "--save-inputs", type=Path, metavar="NPZ", help="also write the seeded inputs (.npz)"
    )
    parser.add_argument(
        "--save-output",
        type=Path,
        metavar="NPZ",
        help="also write the output on those inputs, computed here on the CPU (.npz)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0)")
    return parser


def export_command(argv: list[str]) -> int:
    """`boundary export-fn ARGV…`: the exit status."""
    from workers.compiler.jaxenv import apply_jax_environment

    apply_jax_environment()  # JAX_PLATFORMS and libtpu's settings, before jax is imported
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        specs = [parse_arg(text) for text in args.arg]
        platforms = parse_platforms(args.platforms)
        if (args.save_inputs or args.save_output) and "cpu" not in platforms:
            raise ExportUsageError("--save-inputs/--save-output need cpu among --platforms")
        function = load_function(args.target)
    except ExportUsageError as exc:
        print(f"boundary export-fn: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        data, exported = export_function(function, specs, platforms)
    except Exception as exc:  # noqa: BLE001 - the user's function may fail in any way
        print(f"boundary export-fn: export failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_EXPORT_FAILED
    args.output.write_bytes(data)
    header = read_header(data)
    summary: dict[str, Any] = {
        "file": str(args.output),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        **header.as_dict(),
    }
    if args.save_inputs or args.save_output:
        inputs, output = sample_files(exported, args.seed)
        for path, blob, key in (
            (args.save_inputs, inputs, "inputs"),
            (args.save_output, output, "output"),
        ):
            if path is not None:
                path.write_bytes(blob)
                summary[key] = {"file": str(path), "sha256": hashlib.sha256(blob).hexdigest()}
    print(json.dumps(summary, indent=2))
    return EXIT_OK


# --- `boundary run exported artifact=@fn.jaxexport` ---------------------------------------


def resolve_file_params(
    workload: str,
    params: dict[str, Any],
    *,
    files_dir: Path | None = None,
    server: str | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """`params` with every `@PATH` value of a file parameter replaced by the file's SHA-256.

    For a local run the file is put in the worker-side file cache (`files_dir`); with
    `server` it is uploaded there. ValueError names the parameter when a file is missing,
    unreadable or refused.
    """
    cls = WORKLOADS.get(workload)
    fields: dict[str, str] = getattr(cls, "file_fields", {}) if cls is not None else {}
    resolved = dict(params)
    for name, value in params.items():
        if name not in fields or not isinstance(value, str) or not value.startswith("@"):
            continue
        path = Path(value[1:]).expanduser()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"params.{name}: cannot read {path}: {exc.strerror}") from None
        if name == "artifact":
            try:
                read_header(data)
            except ArtifactError as exc:
                raise ValueError(f"params.{name}: {path}: {exc}") from None
        if server is None:
            resolved[name] = FileCache(files_dir).put(data)
        else:
            resolved[name] = upload(
                server, data, "exported" if name == "artifact" else "npz", token
            )
    return resolved


def upload(server: str, data: bytes, kind: str, token: str | None = None) -> str:
    """Upload a file to a server's /api/v1/artifacts; its SHA-256 (ValueError if refused)."""
    headers = {"Content-Type": "application/octet-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    response = httpx.post(
        f"{server.rstrip('/')}/api/v1/artifacts",
        params={"kind": kind},
        content=data,
        headers=headers,
        timeout=60.0,
    )
    if response.status_code not in (200, 201):
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text[:300]
        raise ValueError(f"the server refused the {kind} file ({response.status_code}): {detail}")
    digest: str = response.json()["sha256"]
    return digest


if __name__ == "__main__":
    sys.exit(export_command(sys.argv[1:]))
