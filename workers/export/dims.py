"""Symbolic dimensions of an exported function, as its header writes them.

`jax.export` keeps a dimension exported with `jax.export.symbolic_shape("b")` as text:
`b`, `2*b + 1`, `b*s`, `b^2`, `floordiv(b, 2)`, `mod(b, 8)`, `max(b, 1)`. A run of such an
artifact gives each name a value (`params.dims`, e.g. `{"b": 64}`), and every shape then
has a size. This module reads those expressions without jax, by walking Python's own
parse of them: names, whole numbers, `+ - * //`, a power with a small exponent, and
jax's functions, nothing else (no attribute, no other call, no string).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
"""What a dimension's name may be (a Python identifier, at most 32 characters)."""
MAX_TEXT = 256
MAX_POWER = 8
FUNCTIONS: dict[str, Callable[..., int]] = {
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "max": max,
    "min": min,
    "non_negative": lambda a: max(a, 0),
}


class DimError(ValueError):
    """A dimension that cannot be read, or given no usable value."""


def _parse(text: str) -> ast.expr:
    if len(text) > MAX_TEXT:
        raise DimError(f"the dimension {text[:40]!r}… is over {MAX_TEXT} characters")
    try:
        tree = ast.parse(text.replace("^", "**"), mode="eval")
    except SyntaxError:
        raise DimError(f"the dimension {text!r} is not one jax writes") from None
    return tree.body


def names(text: str) -> set[str]:
    """The symbolic names a dimension uses (none for a number)."""
    if text.isdigit():
        return set()
    found = set()
    for node in ast.walk(_parse(text)):
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            if not NAME.match(node.id):
                raise DimError(f"the dimension name {node.id!r} is not usable")
            found.add(node.id)
    _value(_parse(text), {n: 1 for n in found})  # every node is one we can evaluate
    return found


def value(text: str, values: Mapping[str, int]) -> int:
    """The dimension's size when each name has its value; DimError naming what is
    missing, or a size below 0."""
    if text.isdigit():
        return int(text)
    size = _value(_parse(text), values)
    if size < 0:
        raise DimError(f"the dimension {text} is {size} with {_given(text, values)}")
    return size


def _given(text: str, values: Mapping[str, int]) -> str:
    return ", ".join(f"{n}={values[n]}" for n in sorted(names(text)) if n in values)


def _value(node: ast.expr, values: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise DimError(f"no value for the dimension {node.id}")
        return int(values[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, values)
    if isinstance(node, ast.BinOp):
        return _binary(node, values)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in FUNCTIONS
        and not node.keywords
        and 1 <= len(node.args) <= 2
    ):
        args = [_value(a, values) for a in node.args]
        if node.func.id in ("floordiv", "mod") and args[-1] == 0:
            raise DimError("a dimension divides by zero")
        return int(FUNCTIONS[node.func.id](*args))
    raise DimError(f"the dimension holds {ast.unparse(node)!r}, which jax does not write")


def _binary(node: ast.BinOp, values: Mapping[str, int]) -> int:
    left, right = _value(node.left, values), _value(node.right, values)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    if isinstance(node.op, ast.FloorDiv | ast.Mod):
        if right == 0:
            raise DimError("a dimension divides by zero")
        return left // right if isinstance(node.op, ast.FloorDiv) else left % right
    if isinstance(node.op, ast.Pow) and 0 <= right <= MAX_POWER:
        return int(left**right)
    raise DimError(f"the dimension holds {ast.unparse(node)!r}, which jax does not write")


def dims_problem(names: list[str], dims: Mapping[str, int]) -> tuple[str, str] | None:
    """(field, message) when `dims` does not give exactly the artifact's symbolic
    dimensions (`names`) a value: one missing, or one it does not have; None when they
    fit."""
    extra = sorted(set(dims) - set(names))
    if extra:
        having = f"its dimensions: {', '.join(names)}" if names else "its shapes are concrete"
        return f"params.dims.{extra[0]}", f"the artifact has no dimension {extra[0]} ({having})"
    missing = [n for n in names if n not in dims]
    if missing:
        return (
            f"params.dims.{missing[0]}",
            f"the artifact's shapes are symbolic in {', '.join(names)}: give each a value, "
            f'e.g. "dims": {{"{missing[0]}": 64}} (--dim {missing[0]}=64)',
        )
    return None


def symbolic_arguments(texts: list[str]) -> dict[str, list[str]]:
    """export-fn's `--symbolic NAME=ARG[,ARG]` words: each dimension's arguments, whose
    arrays' leading axis it becomes (DimError naming the word)."""
    found: dict[str, list[str]] = {}
    for text in texts:
        name, sep, rest = text.partition("=")
        arguments = [a.strip() for a in rest.split(",") if a.strip()]
        if not sep or not NAME.match(name) or name in FUNCTIONS or not arguments:
            raise DimError(f"--symbolic {text!r}: expected NAME=ARG[,ARG], e.g. b=tokens")
        if name in found:
            raise DimError(f"--symbolic {name}: given twice")
        found[name] = arguments
    return found
