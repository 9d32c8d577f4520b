"""`boundary run`: build a job from the command line, run it in this process (or, with
`--server URL`, submit it to that server and wait: `workers.cli.submit`), and print the
run (`workers.cli.printout`).

`app.cli` dispatches the `run` subcommand to `run_command`. jax is imported only when
a run actually happens in this process, so argument errors are reported at once. A
parameter given as `@FILE` is stored locally (or uploaded) and named by its SHA-256.

Exit status: 0 for a valid run, 1 for a run whose output failed the correctness check
(or an artifact that was not produced), 2 for a job that cannot run here (bad
parameters, a path without its devices).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from workers.catalog import WORKLOADS, CatalogError, describe_validation_error
from workers.catalog.job_limit import job_limit
from workers.catalog.values import parse_value
from workers.cli.printout import print_result
from workers.export.server_address import EXAMPLES, ServerAddress, server_option
from workers.protocol import (
    ARTIFACT_NAMES,
    MAX_SAMPLES,
    CachePolicy,
    JobSpec,
    Mode,
    PathId,
    ProgressEvent,
    StageId,
    TargetError,
    parse_target,
)
from workers.protocol.compiler_options import (
    OptionError,
    OptionValue,
    allowed_table,
    check_options,
    compiler_for,
)

EXIT_BAD_JOB = 2

CACHE_DIR_ENV = "BOUNDARY_CACHE_DIR"

_INTEGER = re.compile(r"^[+-]?\d+$")


class UsageError(ValueError):
    """A command line that does not describe a job; the message names the culprit."""


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`key=value` words as a parameter dict; a repeated or malformed key is an error."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"parameter {item!r}: expected key=value")
        if key in params:
            raise UsageError(f"params.{key}: given twice")
        params[key] = parse_value(value)
    return params


def with_dims(params: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """`params` with `--dim NAME=N` words as `params.dims` (UsageError naming the word)."""
    if not texts:
        return params
    dims: dict[str, Any] = dict(params.get("dims") or {})
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name or not _INTEGER.match(value):
            raise UsageError(f"--dim {text!r}: expected NAME=N, e.g. b=64")
        if name in dims:
            raise UsageError(f"params.dims.{name}: given twice")
        dims[name] = int(value)
    return {**params, "dims": dims}


def parse_samples(text: str) -> int | str:
    """`--samples`: a count from 1 to MAX_SAMPLES, or 'auto'."""
    if text == "auto":
        return text
    if not _INTEGER.match(text) or not 1 <= int(text) <= MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer from 1 to {MAX_SAMPLES}")
    return int(text)


def parse_stages(text: str) -> list[str]:
    """`--stages`: a comma-separated list of stage names."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    allowed = [s.value for s in StageId]
    for name in names:
        if name not in allowed:
            raise argparse.ArgumentTypeError(
                f"{name!r} is no stage (allowed: {', '.join(allowed)})"
            )
    if not names:
        raise argparse.ArgumentTypeError("name at least one stage")
    return names


def _measure_options(parser: argparse.ArgumentParser) -> None:
    """How the execute stage samples: the job's `measure` options."""
    parser.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.LATENCY.value)
    parser.add_argument("--samples", type=parse_samples, default=20, help="N or auto")
    parser.add_argument(
        "--cache", choices=[c.value for c in CachePolicy], default=CachePolicy.COLD.value
    )
    parser.add_argument("--calls-per-sample", type=int, default=None, help="K in throughput mode")
    parser.add_argument("--max-seconds", type=float, default=None, help="time cap on sampling")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="capture a JAX profiler trace of the sampled calls (adds the profiler's cost)",
    )
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="compile once more with XLA's per-pass dump and keep the pass pipeline "
        "(the reported compile time excludes it)",
    )
    parser.add_argument(
        "--flush-l2",
        action="store_true",
        help="cuda path: flush the GPU's L2 cache before each sample (cold-cache timing)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `boundary run` argument parser."""
    parser = argparse.ArgumentParser(
        prog="boundary run",
        description="Run a workload through trace → lower → compile → execute and report it.",
    )
    parser.add_argument("workload", help=f"one of: {', '.join(WORKLOADS)}")
    parser.add_argument(
        "params",
        nargs="*",
        metavar="key=value",
        help="workload parameters, before, between or after the options",
    )
    parser.add_argument(
        "--path",
        choices=[p.value for p in PathId],
        default=None,
        help="default: jax-cpu, or the path the target names (jax-tpu, jax-gpu)",
    )
    parser.add_argument(
        "--target",
        metavar="TARGET",
        help="compile for this target: a TPU slice (v5e:1x1 … v5e:16x16, v6e:1x1 … "
        "v6e:16x16, v4:2x2x1 …, v5p:2x2x1 …, tpu7x:1x1x1 …) or GPUs (b200:N, h100:N, "
        "h200:N; N = 1, 2, 4, 8); without its hardware it is compiled, never run",
    )
    parser.add_argument(
        "--stages",
        type=parse_stages,
        default=None,
        help="e.g. compile,execute (default: compile,execute; with --target: compile)",
    )
    _measure_options(parser)
    parser.add_argument(
        "--xla-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an XLA option for this job's compiles, e.g. xla_gpu_enable_triton_gemm=false "
        "(repeatable; only options on the allow-list of the path's compiler)",
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="exported: the value of a symbolic dimension of the artifact, e.g. b=64 "
        "(repeatable; the same as params.dims)",
    )
    parser.add_argument(
        "--server",
        type=server_option,
        metavar="URL",
        help=f"submit to this server instead, e.g. {EXAMPLES}",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the run result as JSON")
    output.add_argument("--ir", choices=list(ARTIFACT_NAMES), help="print one artifact")
    return parser


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """The `boundary run` words as parsed arguments, `key=value` parameters anywhere.

    argparse fills a `nargs="*"` positional once, from the words before the first option,
    and calls every later parameter an unrecognized argument. The words it leaves over are
    therefore parameters too, unless they look like an option: those, and only those, are
    named in the usage error.
    """
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    unknown = [word for word in extras if word.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.params = [*args.params, *extras]
    return args


def xla_options(path: str, texts: list[str]) -> dict[str, OptionValue]:
    """`--xla-option NAME=VALUE` words, checked for the path's compiler; UsageError naming
    the first problem (and, for a name that is not allowed, every name that is)."""
    try:
        compiler = compiler_for(path)
        return check_options(texts, compiler)
    except OptionError as exc:
        message = f"--xla-option {exc.message}"
        if exc.name is not None and " is not allowed: " in exc.message:
            names = [name for name, _, _ in allowed_table(compiler)]
            message += f"\nallowed for {compiler}: {', '.join(names)}"
        raise UsageError(message) from None


def build_job(args: argparse.Namespace) -> JobSpec:
    """The job the parsed command line describes, validated by the wire contract."""
    measure: dict[str, Any] = {"mode": args.mode, "samples": args.samples, "cache": args.cache}
    if args.calls_per_sample is not None:
        measure["calls_per_sample"] = args.calls_per_sample
    if args.max_seconds is not None:
        measure["max_seconds"] = args.max_seconds
    if args.profile:
        measure["profile"] = True
    if args.flush_l2:
        measure["flush_l2"] = True
    if args.pipeline:
        measure["pipeline"] = True
    raw: dict[str, Any] = {
        "workload": args.workload,
        "params": with_dims(parse_assignments(args.params), args.dim),
        "measure": measure,
    }
    # Left out, the job's own defaults apply: they follow the target (its stages, its path).
    if args.path is not None:
        raw["path"] = args.path
    if args.stages is not None:
        raw["stages"] = args.stages
    if args.target is not None:
        raw["target"] = args.target
    if args.xla_option:
        raw["compiler_options"] = xla_options(_path_of(args), args.xla_option)
    try:
        job = JobSpec.model_validate(raw)
    except ValidationError as exc:
        message, _ = describe_validation_error(exc)
        raise UsageError(message) from None
    from workers.catalog.target_rules import apply_target

    try:
        return apply_target(job)  # how the target combines with path, workload and devices
    except CatalogError as exc:
        raise UsageError(str(exc)) from None


def _path_of(args: argparse.Namespace) -> str:
    """The path a job of `args` goes on: --path, else its target's, else jax-cpu."""
    if args.path is not None:
        return str(args.path)
    if args.target is not None:
        try:
            return parse_target(args.target).path.value
        except TargetError as exc:
            raise UsageError(f"target: {exc}") from None
    return PathId.JAX_CPU.value


def _with_files(job: JobSpec, server: ServerAddress | None) -> JobSpec:
    """`job` with its `@FILE` parameters stored locally (or uploaded) and named by SHA-256."""
    from workers.cli.files import resolve_file_params

    try:
        params = resolve_file_params(
            job.workload, job.params, server=server, token=os.environ.get("BOUNDARY_SUBMIT_TOKEN")
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return job.model_copy(update={"params": params})


def _settings() -> tuple[Path | None, int]:
    """The cache directory and byte cap from BOUNDARY_* environment variables."""
    cache_dir = os.environ.get(CACHE_DIR_ENV)
    try:
        max_bytes = job_limit(os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return (Path(cache_dir).expanduser() if cache_dir else None), max_bytes


def _progress_to_stderr(event: ProgressEvent) -> None:
    count = f" {event.k}/{event.n if event.n is not None else 'auto'}" if event.k else ""
    message = f" {event.message}" if event.message else ""
    print(f"[{event.phase}]{count}{message}", file=sys.stderr, flush=True)


def submit_to_server(job: JobSpec, server: ServerAddress, as_json: bool, ir: str | None) -> int:
    """Submit `job` to `server`, wait for its run and print it (or its artifact `ir`,
    fetched from the server)."""
    from workers.cli import submit

    return submit.submit_to_server(job, server, as_json, ir=ir)


def run_command(argv: list[str]) -> int:
    """`boundary run ARGV...`: parse, run here (or submit), print; return the exit status."""
    try:
        args = parse_command_line(argv)
    except SystemExit as exc:  # argparse has printed the usage or the help
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_JOB
    try:
        job = build_job(args)
        if any(isinstance(v, str) and v.startswith("@") for v in job.params.values()):
            job = _with_files(job, args.server)
        if args.server:
            return submit_to_server(job, args.server, args.json, args.ir)
        cache_dir, max_bytes = _settings()
    except UsageError as exc:
        print(f"boundary run: {exc}", file=sys.stderr)
        return EXIT_BAD_JOB

    from workers.compiler.jaxenv import apply_jax_environment
    from workers.scale.devices import ensure_cpu_devices

    apply_jax_environment()  # JAX_PLATFORMS and libtpu's settings, before jax is imported
    try:
        # A jax-cpu job over N devices needs N virtual devices, fixed when JAX starts.
        relaunched = ensure_cpu_devices(job, argv, max_bytes)
    except CatalogError as exc:
        print(f"boundary run: {exc}", file=sys.stderr)
        return EXIT_BAD_JOB
    if relaunched is not None:
        return relaunched

    from workers.files import FileCache, job_files
    from workers.run.engine import PathUnavailable, run_job

    progress = _progress_to_stderr if sys.stderr.isatty() else None
    files = FileCache()
    try:
        with contextlib.ExitStack() as pins:  # a shared folder keeps the job's files meanwhile
            for sha in job_files(job.model_dump(mode="json")).values():
                pins.enter_context(files.pinned(sha))
            result = run_job(job, progress, cache_dir=cache_dir, max_bytes=max_bytes)
    except (CatalogError, PathUnavailable) as exc:
        print(f"boundary run: {exc}", file=sys.stderr)
        return EXIT_BAD_JOB
    return print_result(result, args.json, args.ir)
