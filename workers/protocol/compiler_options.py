"""XLA options a job sets for its compile: checked against the allow-list of the job's
compiler (`workers.protocol.option_lists`) and turned into the types that compiler takes.

`lowered.compile(compiler_options={...})` hands each name and value to the compiler of the
job's path, which answers differently (checked on jaxlib 0.10.2 and libtpu 0.0.42):
XLA:CPU and XLA:GPU take any field of XLA's `DebugOptions`, whatever the backend, and
refuse the text "false" for a bool; libtpu takes its own flags too, parses them from text,
and some values of some flags abort the whole process. So Boundary passes on only what it
lists, each value checked against its type and bounds.

No jax here: the server refuses a job with these checks (422) before queueing it, the
command line before running it (exit 2), and the worker reads the same job spec.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from workers.protocol.option_lists import ALLOWED, Compiler, OptionSpec

OptionValue = bool | int | str
"""A checked value, of the type its compiler takes."""

MAX_OPTIONS = 16
"""At most this many options per job."""

PATH_COMPILER: dict[str, Compiler] = {
    "jax-cpu": Compiler.XLA_CPU,
    "jax-gpu": Compiler.XLA_GPU,
    "jax-tpu": Compiler.LIBTPU,
}
"""Which compiler each JAX path's options go to."""

OPTIONS_PAGE = "/compiler-options"
"""The page that lists every allowed option, its values and what it changes."""

NONE = "none"
"""How a job without compiler options reads where its options are named."""


class OptionError(ValueError):
    """A compiler option Boundary refuses, said in plain words."""

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.name = name


def compiler_for(path: str) -> Compiler:
    """The compiler whose options a job on `path` may set; OptionError for `cuda`."""
    if path == "cuda":
        raise OptionError(
            "path cuda compiles CUDA C++ with nvcc, not with XLA; compiler options apply to "
            "jax-cpu, jax-gpu and jax-tpu"
        )
    try:
        return PATH_COMPILER[path]
    except KeyError:
        raise OptionError(f"unknown path {path[:40]!r}") from None


def split_assignment(text: str) -> tuple[str, str]:
    """(name, value text) of one `NAME=VALUE`; OptionError when there is no `=`."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name:
        example = name[:80] or "xla_gpu_enable_triton_gemm"
        raise OptionError(f"{text[:80]!r}: write NAME=VALUE, e.g. {example}=false", name or None)
    if not value:
        raise OptionError(f"{name[:80]}: give a value after '='", name)
    return name, value


def _refusal_reason(name: str) -> str | None:
    """Why a known kind of option is never passed on, or None."""
    lowered = name.lower()
    if "dump" in lowered:
        return "it writes dump files on the worker (ask for --pipeline to see every pass)"
    if lowered.endswith(("_to", "_dir", "_path", "_file", "_filename", "_directory")):
        return "it names a file or folder on the worker"
    if lowered in {"xla_force_host_platform_device_count", "xla_flags_reset"}:
        return "it is set once per process, not per compile"
    return None


def _lookup(name: str, compiler: Compiler) -> OptionSpec:
    allowed = ALLOWED[compiler]
    if name in allowed:
        return allowed[name]
    elsewhere = [c.value for c, specs in ALLOWED.items() if name in specs]
    reason = _refusal_reason(name)
    if elsewhere:
        why = f"it is an option of {' and '.join(elsewhere)}, and this job compiles with {compiler}"
    elif reason is not None:
        why = reason
    else:
        why = f"it is not on Boundary's list for {compiler}"
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.75)
    hint = f" Did you mean {close[0]}?" if close else ""
    raise OptionError(
        f"{name[:80]} is not allowed: {why}.{hint} The {len(allowed)} options allowed for "
        f"{compiler} are listed at {OPTIONS_PAGE}",
        name,
    )


def _bad(spec: OptionSpec, shown: str) -> OptionError:
    return OptionError(f"{spec.name} takes {spec.describe_type()}; {shown} is not one", spec.name)


def parse_value(spec: OptionSpec, value: object, *, from_text: bool) -> OptionValue:
    """`value` as its compiler takes it, or OptionError saying what the option takes.

    `from_text` is True for `NAME=VALUE` text (the command line, the run form), where
    every value arrives as a string; JSON values must already have the option's type (the
    API is strict: "false" is not a bool, true is not a number).
    """
    shown = repr(value)[:40]
    if spec.kind in ("bool", "switch"):
        word = value.strip().lower() if from_text and isinstance(value, str) else None
        if isinstance(value, bool):
            word = "true" if value else "false"
        elif (
            spec.kind == "switch" and isinstance(value, str) and value in ("auto", "true", "false")
        ):
            word = value
        if word in ("true", "false") or (spec.kind == "switch" and word == "auto"):
            return (word == "true") if spec.kind == "bool" else str(word)
        raise _bad(spec, shown)
    if spec.kind == "enum":
        text = value.strip() if isinstance(value, str) else None
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        if text is None or text not in spec.choices:
            raise _bad(spec, shown)
        # A choice that is a number is an integer field of the compiler's (a vector width).
        return int(text) if text.isdigit() else text
    if from_text and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise _bad(spec, shown)
    assert spec.minimum is not None and spec.maximum is not None
    if not spec.minimum <= number <= spec.maximum:
        raise _bad(spec, shown)
    return number


def check_options(
    given: Mapping[str, object] | Iterable[str], compiler: Compiler
) -> dict[str, OptionValue]:
    """The options a job asked for, checked for `compiler` and sorted by name (so the same
    options always make the same compile, and the same cache key).

    `given` is a job spec's `{"name": value}` mapping, or the `NAME=VALUE` texts of
    `--xla-option` and the run form. Raises OptionError naming the first problem.
    """
    if isinstance(given, Mapping):
        pairs: list[tuple[object, object]] = list(given.items())
        from_text = False
    else:
        pairs = [split_assignment(text) for text in given]
        from_text = True
    if len(pairs) > MAX_OPTIONS:
        raise OptionError(f"at most {MAX_OPTIONS} options, not {len(pairs)}")
    checked: dict[str, OptionValue] = {}
    for name, value in pairs:
        if not isinstance(name, str):
            raise OptionError("option names are text")
        if name in checked:
            raise OptionError(f"{name[:80]} is given twice", name)
        checked[name] = parse_value(_lookup(name, compiler), value, from_text=from_text)
    return dict(sorted(checked.items()))


def show_value(value: OptionValue) -> str:
    """A checked value as a person types it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def as_text(options: Mapping[str, OptionValue]) -> str:
    """`name=value` pairs as a person types them ("none" when there are none)."""
    if not options:
        return NONE
    return ", ".join(f"{n}={show_value(v)}" for n, v in sorted(options.items()))


def as_lines(options: Mapping[str, OptionValue]) -> str:
    """One `NAME=VALUE` per line: what the run form's box holds."""
    return "\n".join(f"{n}={show_value(v)}" for n, v in sorted(options.items()))


def as_arguments(options: Mapping[str, OptionValue]) -> list[str]:
    """The `--xla-option NAME=VALUE` words that ask for `options` on the command line."""
    words: list[str] = []
    for name, value in sorted(options.items()):
        words += ["--xla-option", f"{name}={show_value(value)}"]
    return words


def allowed_table(compiler: Compiler) -> list[tuple[str, str, str]]:
    """(name, values, meaning) of every option allowed for `compiler`, for a help page."""
    return [(s.name, s.describe_type(), s.meaning) for s in ALLOWED[compiler].values()]
