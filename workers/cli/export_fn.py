"""`boundary export-fn MODULE:FUNCTION --example MODULE:EXAMPLE [-o fn.jaxexport]`.

Runs in the user's own environment, where the model runs: it needs only the standard
library, NumPy, the model's own jax and (for `--upload`) httpx, never the server's
dependencies (`app.cli` hands over before importing them, and this module imports
nothing of the server's side). The function is exported with `jax.export` (StableHLO plus
its calling convention) for the requested platforms, from example arguments of any
structure (`workers.export.trees`). The artifact is data: a worker compiles and times it
without any of the user's code.

- `--example MODULE:EXAMPLE` calls EXAMPLE() for the arguments: a tuple, a dict of keyword
  arguments, or ((args), {kwargs}); leaves are arrays, arrays placed with a NamedSharding
  (a multi-device export), or ShapeDtypeStructs (nothing allocated). `--arg DTYPE[SHAPE]`,
  one per positional argument, still works for a function of plain arrays.
- The example's arrays are the runs' inputs: written beside the artifact as
  FUNCTION.inputs.npz (named by path), uploaded with it, and named as `params.inputs` of
  the run it queues; arguments given as ShapeDtypeStructs are drawn from `--seed` under
  `--input-rules` (`workers.export.rules`), and `--generated-inputs` draws them all. The
  summary's `run_inputs` says which.
- `--devices N` gives this process N virtual CPU devices before jax starts, for an example
  that builds a mesh of N.
- `--save-inputs`, `--save-output` and `--save-output-sample K` run the artifact itself
  on this machine's CPU, on exactly the inputs a worker uses (the example's arrays, the
  rest drawn from `--seed` and `--input-rules`), and write them, its results, or K seeded
  (index, value) pairs per result.
- The Python lines the program names (with a few lines around each, bounded) are written
  beside the artifact as FUNCTION.sources.json (`workers.export.sources`), so that run pages
  show each line next to its `file:line`; `--no-source` sends none.
- `--upload URL` posts the artifact (its source lines, its inputs file and the sample) to a
  server, then queues one compile per `--target`, and a jax-cpu run on those inputs checked
  against the sample when there is one.
- `--state MODULE:NAME` writes a model's or optimizer's state (flax.nnx, equinox, optax, any
  pytree) as an .npz of arrays named by path, and prints those names.

Exit status: 0 done, 2 a bad command line, 3 the export (or the run here) failed, 4 the
server refused something (what was done before is printed).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from workers.export.dims import DimError, symbolic_arguments
from workers.export.server_address import EXAMPLES, server_option

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_EXPORT_FAILED = 3
EXIT_UPLOAD_FAILED = 4

DEVICE_FLAG = "--xla_force_host_platform_device_count"
_ARG = re.compile(r"^\s*([a-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*$")
_ARG_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "bfloat16",
)  # fmt: skip


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
    if dtype not in _ARG_DTYPES:
        raise ExportUsageError(f"--arg {text!r}: unknown dtype (known: {', '.join(_ARG_DTYPES)})")
    shape = tuple(int(d.strip()) for d in dims.split(",") if d.strip())
    if any(d <= 0 for d in shape):
        raise ExportUsageError(f"--arg {text!r}: every dimension must be at least 1")
    return dtype, shape


def parse_platforms(text: str) -> list[str]:
    """`cpu,cuda,tpu` as a list, each a platform jax.export knows."""
    known = ("cpu", "cuda", "rocm", "tpu")
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    for name in names:
        if name not in known:
            raise ExportUsageError(
                f"--platforms: {name!r} is no platform (known: {', '.join(known)})"
            )
    if not names:
        raise ExportUsageError("--platforms: name at least one platform")
    return list(dict.fromkeys(names))


def parse_rules(text: str | None) -> dict[str, Any] | None:
    """`--input-rules`: JSON, or @FILE holding JSON: an object from paths to rules."""
    if text is None:
        return None
    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
    except OSError as exc:
        raise ExportUsageError(f"--input-rules: cannot read {text[1:]}: {exc.strerror}") from None
    try:
        rules = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ExportUsageError(f"--input-rules: not JSON ({exc})") from None
    if not isinstance(rules, dict):
        raise ExportUsageError("--input-rules: an object from argument paths to rules")
    return rules


def load_object(target: str, flag: str) -> Any:
    """The object named by MODULE:NAME, MODULE being a dotted module or a .py file.

    The module's directory (the current one for a dotted name) is appended to sys.path,
    never put first: a file there named like a library (h2.py, which httpx imports)
    must not shadow it.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ExportUsageError(f"{flag} {target!r}: expected MODULE:NAME, e.g. mymodel.train:step")
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        if str(path.parent) not in sys.path:
            sys.path.append(str(path.parent))  # its own sibling modules
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise ExportUsageError(f"{flag} {module_name}: no such Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(path.stem, module)
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())  # like `python -m`, but last
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise ExportUsageError(f"{flag} {target!r}: {exc}") from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ExportUsageError(f"{flag} {target!r}: {module_name} has no {attribute!r}")
        found = getattr(found, part)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boundary export-fn",
        description="Export a JAX function with jax.export, to compile and run on Boundary.",
    )
    parser.add_argument("function", metavar="MODULE:FUNCTION", nargs="?")
    parser.add_argument("--example", metavar="MODULE:EXAMPLE", help="returns the arguments")
    parser.add_argument(
        "--arg", action="append", default=[], metavar="DTYPE[SHAPE]", help="instead of --example"
    )
    parser.add_argument("--platforms", default="cpu,cuda,tpu", help="default: cpu,cuda,tpu")
    parser.add_argument("--devices", type=int, default=None, metavar="N", help="virtual CPUs")
    parser.add_argument("-o", "--output", type=Path, help="the file (default FUNCTION.jaxexport)")
    parser.add_argument("--input-rules", metavar="JSON|@FILE", help="per-argument input rules")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0)")
    parser.add_argument("--save-inputs", type=Path, metavar="NPZ", help="the run's inputs, all")
    parser.add_argument(
        "--generated-inputs",
        action="store_true",
        help="use the example for shapes only: every input is drawn from --seed and "
        "--input-rules (by default the example's arrays are the runs' inputs)",
    )
    parser.add_argument("--save-output", type=Path, metavar="NPZ", help="every result, whole")
    parser.add_argument(
        "--save-output-sample", type=int, metavar="K", help="K sampled elements per result"
    )
    parser.add_argument("--sample-file", type=Path, metavar="NPZ", help="where the sample goes")
    parser.add_argument("--upload", type=server_option, metavar="URL", help=f"e.g. {EXAMPLES}")
    parser.add_argument("--token", help="the server's submission token ($BOUNDARY_SUBMIT_TOKEN)")
    parser.add_argument(
        "--target", action="append", default=[], help="compile for it (repeatable): v6e:2x4 …"
    )
    parser.add_argument(
        "--symbolic",
        action="append",
        default=[],
        metavar="NAME=ARG[,ARG]",
        help="make the leading axis of the named arguments' arrays a symbolic dimension "
        "NAME (repeatable), e.g. b=tokens: a run then gives it a value (--dim b=64)",
    )
    parser.add_argument("--state", metavar="MODULE:NAME", help="write a state's arrays by path")
    parser.add_argument(
        "--no-source",
        action="store_true",
        help="send no Python source: by default the lines the program names (a few around "
        "each, at most 256 KiB) go beside the artifact as FUNCTION.sources.json and, with "
        "--upload, to the server, whose run pages show them next to each file:line",
    )
    return parser


def _check(args: argparse.Namespace) -> list[str]:
    """The platforms, once the command line's combinations are checked."""
    platforms = parse_platforms(args.platforms)
    if args.state is None and args.function is None:
        raise ExportUsageError("name the function to export: MODULE:FUNCTION")
    if args.state is None and (args.example is None) == (not args.arg):
        raise ExportUsageError("give the arguments with --example MODULE:EXAMPLE or with --arg")
    if args.devices is not None and not 1 <= args.devices <= 4096:
        raise ExportUsageError("--devices: from 1 to 4096")
    if args.save_output_sample is not None and args.save_output_sample < 1:
        raise ExportUsageError("--save-output-sample: K must be at least 1")
    runs_here = args.save_inputs or args.save_output or args.save_output_sample is not None
    if runs_here and "cpu" not in platforms:
        raise ExportUsageError(
            "saving inputs or outputs runs the artifact here: add cpu to --platforms"
        )
    if args.target and not args.upload:
        raise ExportUsageError("--target needs --upload URL: targets are compiled on a server")
    return platforms


def _prepare_process(devices: int | None) -> None:
    """JAX's environment, before jax is imported: the CPU, and N virtual devices."""
    from workers.compiler.jaxenv import apply_jax_environment

    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # export and sample runs are the CPU's
    apply_jax_environment()
    if devices is not None and devices > 1:
        flags = os.environ.get("XLA_FLAGS", "").split()
        flags = [f for f in flags if not f.startswith(DEVICE_FLAG)]
        os.environ["XLA_FLAGS"] = " ".join([*flags, f"{DEVICE_FLAG}={devices}"])


def export_function(
    function: Any, args: list[tuple[str, tuple[int, ...]]], platforms: list[str]
) -> tuple[bytes, Any]:
    """`function` of positional arrays (dtype, shape) exported for `platforms`: the
    artifact's bytes and the Exported (what `--arg` does)."""
    import jax

    from workers.export.rules import numpy_dtype
    from workers.export.trees import export_example

    struct = cast("Callable[..., Any]", jax.ShapeDtypeStruct)
    example = tuple(struct(shape, numpy_dtype(dtype)) for dtype, shape in args)
    made = export_example(function, example, platforms, by_name=False)
    return made.data, made.exported


def export_command(argv: list[str]) -> int:
    """`boundary export-fn ARGV…`: the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        platforms = _check(args)
        symbolic = symbolic_arguments(args.symbolic)
        rules = parse_rules(args.input_rules)
        specs = [parse_arg(text) for text in args.arg]
    except (ExportUsageError, DimError) as exc:
        print(f"boundary export-fn: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _prepare_process(args.devices)
    if args.state is not None:
        return _write_state(args)
    made = _export(args, specs, platforms, symbolic)
    if isinstance(made, int):
        return made
    from workers.cli.export_runs import finish
    from workers.export.rules import GIVEN_ONLY, InputRuleError
    from workers.export.trees import ExportError

    try:
        return EXIT_OK if finish(args, made, rules) else EXIT_UPLOAD_FAILED
    except InputRuleError as exc:
        hint = " (or add --generated-inputs to draw them)" if GIVEN_ONLY in str(exc) else ""
        print(f"boundary export-fn: {exc}{hint}", file=sys.stderr)
        return EXIT_USAGE
    except ExportError as exc:
        print(f"boundary export-fn: {exc}", file=sys.stderr)
        return EXIT_EXPORT_FAILED


def _export(
    args: argparse.Namespace,
    specs: list[tuple[str, tuple[int, ...]]],
    platforms: list[str],
    symbolic: dict[str, list[str]],
) -> Any:
    """The function exported from its example (a trees.Exported), or the exit status."""
    from workers.export.trees import ExportError, export_example

    try:
        function = load_object(args.function, "MODULE:FUNCTION")
        example = _example(args, specs)
        if not callable(function):
            raise ExportUsageError(f"{args.function}: not callable")
    except ExportUsageError as exc:
        print(f"boundary export-fn: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the user's example may fail in any way
        failed = f"{type(exc).__name__}: {exc}"
        print(f"boundary export-fn: the example failed: {failed}", file=sys.stderr)
        return EXIT_EXPORT_FAILED
    try:
        # --arg names arguments by position (arg0, …), as it always has; --example by name.
        return export_example(
            function,
            example,
            platforms,
            by_name=args.example is not None,
            symbolic=symbolic,
        )
    except ExportError as exc:
        print(f"boundary export-fn: {exc}", file=sys.stderr)
        return EXIT_EXPORT_FAILED
    except Exception as exc:  # noqa: BLE001 - the user's function may fail in any way
        print(f"boundary export-fn: export failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_EXPORT_FAILED


def _example(args: argparse.Namespace, specs: list[tuple[str, tuple[int, ...]]]) -> Any:
    """The example arguments: EXAMPLE() called, or ShapeDtypeStructs from --arg."""
    if args.example is None:
        import jax

        from workers.export.rules import numpy_dtype

        struct = cast("Callable[..., Any]", jax.ShapeDtypeStruct)
        return tuple(struct(shape, numpy_dtype(dtype)) for dtype, shape in specs)
    example = load_object(args.example, "--example")
    return example() if callable(example) else example


def _write_state(args: argparse.Namespace) -> int:
    """`--state MODULE:NAME`: the state's arrays as an .npz named by path."""
    import numpy as np

    from workers.cli.export_runs import npz_bytes
    from workers.export.header import path_name
    from workers.export.trees import ExportError, plain_tree

    try:
        found = load_object(args.state, "--state")
        # A function (or method) makes the state; anything else (a module, which may itself
        # be callable) is the state.
        state = found() if inspect.isfunction(found) or inspect.ismethod(found) else found
        tree = plain_tree(state, "state")
    except (ExportUsageError, ExportError) as exc:
        print(f"boundary export-fn: {exc}", file=sys.stderr)
        return EXIT_USAGE
    arrays = {path_name(p) or "value": np.asarray(tree.leaf(p)) for p in tree.paths}
    output = args.output or Path("state.npz")
    output.write_bytes(npz_bytes(arrays))
    listing = {name: f"{a.dtype}[{','.join(map(str, a.shape))}]" for name, a in arrays.items()}
    print(json.dumps({"file": str(output), "arrays": listing}, indent=2))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(export_command(sys.argv[1:]))
