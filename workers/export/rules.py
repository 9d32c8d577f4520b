"""Generated inputs under per-argument rules: `params.input_rules`.

A rule set maps an argument's path (`tokens`), or a path prefix ending in `/*`
(`opt_state/0/nu/*`; `*` alone is every argument), to a rule:

    {"kind": "normal", "scale": s}        s × standard normal (s defaults to 1)
    {"kind": "uniform", "low": a, "high": b}
    {"kind": "zeros"} / {"kind": "ones"}  any dtype
    {"kind": "int", "low": a, "high": b}  integers in [a, b): token ids
    {"kind": "positive"}                  |standard normal| + 0.001: never 0, never negative

The longest matching pattern wins (an exact path beats a prefix of the same length).
Arguments no rule matches keep the default draw: floats from N(0, 0.02²) (DEFAULT_SCALE,
the scale transformer weights are initialized at; a complex number's two parts alike),
integers in [-8, 8) ([0, 8) unsigned), booleans at random. Draws come from one NumPy
PCG64 stream seeded by `seed`, argument after argument in the artifact's flat order;
`zeros`, `ones` and arguments given as values (an inputs file's, or the example's in
`boundary export-fn`) draw nothing. NumPy's generator gives the same numbers on every
machine, so `boundary export-fn` computes a reference on exactly the inputs a worker
generates: both call `generate`.

An inputs .npz may give some arguments and leave the rest to be drawn: a member is named
by the argument's path or `argN` (its flat position), and `given_arguments` says which
argument each member gives (refusing a member that names none). A rule applies to the
arguments that are drawn; one that names only given arguments is refused.

Checking a rule set (`resolve_rules`, `resolve_drawn`) needs only the arguments' names,
shapes and dtype names, so the server refuses a bad one (422 naming the argument path)
before anything is queued. NumPy is imported only to draw.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

KINDS = ("normal", "uniform", "zeros", "ones", "int", "positive")
_FIELDS: dict[str, tuple[str, ...]] = {
    "normal": ("scale",),
    "uniform": ("low", "high"),
    "zeros": (),
    "ones": (),
    "int": ("low", "high"),
    "positive": (),
}
FLOAT_KINDS = frozenset({"normal", "uniform", "positive"})
INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
"""The values each integer dtype holds (smallest, largest)."""
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "complex64", "complex128"})
POSITIVE_FLOOR = 1e-3
MAX_RULES = 256
GIVEN_ONLY = "names only arguments whose values are given"
"""How a rule for given arguments alone is refused (export-fn adds what to do instead)."""
DEFAULT_SCALE = 0.02
"""The standard deviation of a float argument no rule names: the scale GPT-2 and BERT
initialize their weights at. A network fed values this small stays in range (softmax
unsaturated, activations near 1 or below) where standard normal values saturate it; see
docs/design/exported-programs.md."""


class Named(Protocol):
    """An argument as the rules see it: its path name, shape and dtype name."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> str: ...


@dataclass(frozen=True)
class ArgumentSpec:
    """One flat argument: its path name, shape and dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str


class InputRuleError(ValueError):
    """A rule that cannot apply; `field` says where: params.input_rules.<pattern>."""

    def __init__(self, pattern: str, message: str) -> None:
        super().__init__(f"params.input_rules[{pattern!r}]: {message}")
        self.field = f"params.input_rules.{pattern}" if pattern else "params.input_rules"


class InputsError(ValueError):
    """An inputs archive whose members do not name the arguments; `field` is params.inputs."""

    field = "params.inputs"

    def __init__(self, message: str) -> None:
        super().__init__(f"params.inputs: {message}")


@dataclass(frozen=True)
class Rule:
    """One parsed rule."""

    kind: str
    scale: float = 1.0
    low: float = 0.0
    high: float = 1.0


def _shown(spec: Named) -> str:
    return f"{spec.dtype}[{','.join(map(str, spec.shape))}]"


def _number(pattern: str, raw: Mapping[str, Any], key: str, integer: bool) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        want = "an integer" if integer else "a number"
        raise InputRuleError(pattern, f"{raw['kind']} needs {key!r}, {want}")
    if not math.isfinite(value):
        raise InputRuleError(pattern, f"{key} must be finite")
    if integer and value != int(value):
        raise InputRuleError(pattern, f"{key} must be an integer, not {value}")
    return float(value)


def parse_rule(pattern: str, raw: Any) -> Rule:
    """One rule from its JSON, refused in plain words."""
    if not isinstance(raw, Mapping) or "kind" not in raw:
        raise InputRuleError(pattern, 'a rule is an object with a "kind"')
    kind = raw["kind"]
    if kind not in KINDS:
        raise InputRuleError(pattern, f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    extra = sorted(set(raw) - {"kind", *_FIELDS[kind]})
    if extra:
        raise InputRuleError(pattern, f"{kind} takes no {', '.join(map(repr, extra))}")
    if kind == "normal":
        scale = _number(pattern, raw, "scale", False) if "scale" in raw else 1.0
        if scale <= 0:
            raise InputRuleError(pattern, f"scale must be above 0, not {scale:g}")
        return Rule(kind, scale=scale)
    if kind in ("uniform", "int"):
        low = _number(pattern, raw, "low", kind == "int")
        high = _number(pattern, raw, "high", kind == "int")
        if low >= high:
            raise InputRuleError(pattern, f"low {low:g} must be below high {high:g}")
        return Rule(kind, low=low, high=high)
    return Rule(kind)


def matches(pattern: str, name: str) -> bool:
    """Whether `pattern` (a path, a prefix `a/b/*`, or `*`) names the argument `name`."""
    if pattern == "*":
        return True
    if pattern.endswith("/*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def _weight(pattern: str) -> tuple[int, int]:
    """Longer wins; at the same length an exact path beats a prefix."""
    if pattern == "*":
        return (0, 0)
    if pattern.endswith("/*"):
        return (len(pattern) - 2, 0)
    return (len(pattern), 1)


def _near(pattern: str, names: Sequence[str]) -> list[str]:
    """A few argument names (or their prefixes) spelled like `pattern`."""
    stem = pattern.removesuffix("*").removesuffix("/")
    prefixes = {
        "/".join(n.split("/")[:i]) + "/*" for n in names for i in range(1, n.count("/") + 1)
    }
    close = difflib.get_close_matches(stem, [*names, *sorted(prefixes)], n=3, cutoff=0.5)
    return close or list(names[:3])


def _check_fits(pattern: str, rule: Rule, spec: Named) -> None:
    if rule.kind == "int" and spec.dtype not in INTEGER_RANGES:
        raise InputRuleError(
            pattern,
            f"int on {spec.name}, which is {_shown(spec)}: an int rule is for integer "
            "arguments (use normal, uniform or positive for floats)",
        )
    if rule.kind in FLOAT_KINDS and spec.dtype not in FLOAT_DTYPES:
        raise InputRuleError(
            pattern,
            f"{rule.kind} on {spec.name}, which is {_shown(spec)}: a {rule.kind} rule is for "
            'floating-point arguments (use {"kind": "int", "low": …, "high": …})',
        )
    if rule.kind == "int":
        smallest, largest = INTEGER_RANGES[spec.dtype]
        if rule.low < smallest or rule.high - 1 > largest:
            raise InputRuleError(
                pattern,
                f"[{rule.low:g}, {rule.high:g}) does not fit {spec.name}'s {spec.dtype} "
                f"({smallest}…{largest})",
            )


def resolve_rules(raw_rules: Any, specs: Sequence[Named]) -> dict[str, Rule]:
    """The winning rule per argument name; InputRuleError for a rule that is malformed,
    matches no argument, or does not fit an argument it wins."""
    if not isinstance(raw_rules, Mapping):
        raise InputRuleError("", "an object from argument paths to rules")
    if len(raw_rules) > MAX_RULES:
        raise InputRuleError("", f"{len(raw_rules)} rules; at most {MAX_RULES}")
    rules = {str(pattern): parse_rule(str(pattern), raw) for pattern, raw in raw_rules.items()}
    names = [s.name for s in specs]
    for pattern in rules:
        if not any(matches(pattern, name) for name in names):
            what = "prefix" if pattern.endswith("/*") else "path"
            near = ", ".join(_near(pattern, names))
            raise InputRuleError(pattern, f"this {what} matches no argument (did you mean: {near})")
    chosen: dict[str, Rule] = {}
    for spec in specs:
        winners = [p for p in rules if matches(p, spec.name)]
        if not winners:
            continue
        pattern = max(winners, key=_weight)
        _check_fits(pattern, rules[pattern], spec)
        chosen[spec.name] = rules[pattern]
    return chosen


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def resolve_drawn(
    raw_rules: Any, specs: Sequence[Named], given: Collection[str]
) -> dict[str, Rule]:
    """`resolve_rules` for the arguments that are drawn, those not in `given` (given as
    values); InputRuleError for a rule that names only given arguments."""
    if not given or not isinstance(raw_rules, Mapping):
        return resolve_rules(raw_rules, [s for s in specs if s.name not in given])
    drawn = [s for s in specs if s.name not in given]
    for pattern in raw_rules:
        named = [s.name for s in specs if matches(str(pattern), s.name)]
        if named and not any(matches(str(pattern), s.name) for s in drawn):
            raise InputRuleError(
                str(pattern),
                f"{GIVEN_ONLY} ({_listed(named)}): a rule draws an argument the inputs leave out",
            )
    return resolve_rules(raw_rules, drawn)


def given_arguments(specs: Sequence[Named], members: Sequence[str]) -> dict[str, str]:
    """Which member of an inputs archive gives each argument it names: argument name →
    member, a member being the argument's path or `argN` (its flat position).
    InputsError for a member that names no argument, or two members naming one."""
    names = [s.name for s in specs]
    position = {f"arg{i}": name for i, name in enumerate(names)}
    found: dict[str, str] = {}
    for member in members:
        name = member if member in names else position.get(member)
        if name is None:
            near = ", ".join(_near(member, names))
            raise InputsError(f"{member} names no argument (did you mean: {near})")
        if name in found:
            raise InputsError(f"{found[name]} and {member} both give {name}")
        found[name] = member
    return found


def numpy_dtype(name: str) -> Any:
    """The NumPy dtype of a dtype name, bfloat16 included (from ml_dtypes, a jax dependency)."""
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _default(spec: Named, rng: Any) -> Any:
    """The draw of an argument no rule names (DEFAULT_SCALE for floats: see there)."""
    import numpy as np

    dtype = numpy_dtype(spec.dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(spec.shape) < 0.5)
    if np.issubdtype(dtype, np.integer):
        low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -8
        return np.asarray(rng.integers(low, 8, size=spec.shape).astype(dtype))
    scale = np.float32(DEFAULT_SCALE)
    if np.issubdtype(dtype, np.complexfloating):
        real = rng.standard_normal(spec.shape, dtype=np.float32) * scale
        imaginary = rng.standard_normal(spec.shape, dtype=np.float32) * scale
        return np.asarray((real + 1j * imaginary).astype(dtype))
    return np.asarray((rng.standard_normal(spec.shape, dtype=np.float32) * scale).astype(dtype))


def draw(spec: Named, rule: Rule | None, rng: Any) -> Any:
    """One argument's values under its rule (the default draw when None)."""
    import numpy as np

    if rule is None:
        return _default(spec, rng)
    dtype = numpy_dtype(spec.dtype)
    if rule.kind == "zeros":
        return np.zeros(spec.shape, dtype)
    if rule.kind == "ones":
        return np.ones(spec.shape, dtype)
    if rule.kind == "int":
        return np.asarray(rng.integers(int(rule.low), int(rule.high), size=spec.shape, dtype=dtype))
    if rule.kind == "normal":
        values = rng.standard_normal(spec.shape, dtype=np.float32) * np.float32(rule.scale)
    elif rule.kind == "uniform":
        values = rng.uniform(rule.low, rule.high, size=spec.shape).astype(np.float32)
    else:  # positive
        values = np.abs(rng.standard_normal(spec.shape, dtype=np.float32))
        values += np.float32(POSITIVE_FLOOR)
    return np.asarray(values.astype(dtype))


def generate(
    specs: Sequence[Named], raw_rules: Any, seed: int, given: Mapping[str, Any] | None = None
) -> list[Any]:
    """Every argument's values (NumPy arrays), in the artifact's flat order: those `given`
    (argument name → values, already checked against the argument) as they are, the rest
    drawn under the rules. The one definition of a run's inputs, for a worker and for
    `boundary export-fn` alike."""
    import numpy as np

    given = given or {}
    chosen = resolve_drawn(raw_rules or {}, specs, given.keys())
    rng = np.random.default_rng(seed)
    return [
        given[spec.name] if spec.name in given else draw(spec, chosen.get(spec.name), rng)
        for spec in specs
    ]
