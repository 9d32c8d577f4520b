"""A function exported from its example arguments, whatever their structure.

jax.export serializes only plain containers (tuples, lists, dicts with string keys,
None): an optax state (named tuples), a flax.nnx module or state (`nnx.Param` nodes) or
an equinox module is refused at `serialize()`. So the function is exported through a
wrapper whose arguments and results are *plain trees*: nested dicts (string keys) and
lists built from each leaf's key path. The wrapper rebuilds the original structures at
trace time (their tree definitions are closed over) and calls the function with them;
the artifact only ever holds plain trees, and the paths survive in its trees.

The wrapper takes keyword arguments named after the function's parameters, so the
artifact's argument names start with them (`params/blocks/0/attn/key/kernel`); its
results are the function's, taken apart the same way (`out1/blocks/0/…` for the second
element of a returned tuple). Leaves that are not arrays (an equinox module's activation
function, a Python number) are closed over as constants, as `equinox.filter_jit` does; a
flax.nnx `Variable` counts as its value, so its path has no trailing `value`.

An example's arrays placed with a `NamedSharding` (or ShapeDtypeStructs carrying one)
make a multi-device export: the artifact keeps the mesh and the shardings.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import jax
import numpy as np

from workers.export.header import ExportHeader, path_name, read_header

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
"""The platforms jax.export lowers for."""

READABLE_CONVENTIONS = (9, 10)
"""The calling conventions Boundary's workers (jax 0.10.2) read. A newer jax that
exports a later one by default is asked for the newest of these instead."""

TreePath = tuple[str | int, ...]

_CONVENTION = "jax_export_calling_convention_version"

shape_dtype_struct = cast("Callable[..., Any]", jax.ShapeDtypeStruct)
"""`jax.ShapeDtypeStruct`, which jax leaves untyped, callable from typed code."""
_config_update = cast("Callable[[str, object], None]", jax.config.update)


class ExportError(ValueError):
    """The function or its example cannot be exported; the message says why."""


def _key_part(key: Any) -> str | int:
    """One step of a jax key path as a plain-tree key: a list index or a string."""
    if isinstance(key, jax.tree_util.SequenceKey):
        return int(key.idx)
    if isinstance(key, jax.tree_util.DictKey):
        return str(key.key)
    if isinstance(key, jax.tree_util.GetAttrKey):
        return str(key.name)
    if isinstance(key, jax.tree_util.FlattenedIndexKey):
        return int(key.key)
    return str(key)


def _is_nnx_variable(x: Any) -> bool:
    """A flax.nnx Variable (Param, BatchStat, …), told without importing flax."""
    return any(
        c.__module__.startswith("flax.nnx") and c.__name__ == "Variable" for c in type(x).__mro__
    )


def _is_array(x: Any) -> bool:
    return isinstance(x, jax.Array | np.ndarray | np.generic | jax.ShapeDtypeStruct)


@dataclass(frozen=True)
class PlainTree:
    """A pytree taken apart into a plain tree of arrays, and how to put it back."""

    plain: Any
    """Nested dicts and lists of the array leaves (or one bare leaf)."""
    paths: tuple[TreePath, ...]
    """Each array leaf's path in `plain`, in the original flattening order."""
    treedef: Any
    """The original tree's structure, its leaves being arrays, Variables or constants."""
    leaf_defs: tuple[Any, ...]
    """Per original leaf: None for an array, the Variable's own treedef for an nnx
    Variable, or ("const", value) for a leaf that is no array (closed over)."""

    def leaf(self, path: TreePath) -> Any:
        """The array at `path` of the plain tree."""
        return _get(self.plain, path)

    def rebuild(self, plain: Any) -> Any:
        """The original structure, with the arrays of `plain` (same paths) in place."""
        leaves: list[Any] = []
        arrays = iter(self.paths)
        for spec in self.leaf_defs:
            if isinstance(spec, tuple) and spec and spec[0] == "const":
                leaves.append(spec[1])
                continue
            value = _get(plain, next(arrays))
            leaves.append(value if spec is None else jax.tree.unflatten(spec, [value]))
        return jax.tree.unflatten(self.treedef, leaves)


def _get(plain: Any, path: TreePath) -> Any:
    node = plain
    for part in path:
        node = node[part]
    return node


def _insert(root: dict[str | int, Any], path: TreePath, value: Any, whole: str) -> None:
    node = root
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ExportError(f"{whole}: two leaves share the path {path_name(path)}")
        node = child
    if path[-1] in node:
        raise ExportError(f"{whole}: two leaves share the path {path_name(path)}")
    node[path[-1]] = value


def _listify(node: Any, whole: str) -> Any:
    """Dicts keyed 0..n-1 by int become lists; any other keys become strings."""
    if not isinstance(node, dict):
        return node
    children = {k: _listify(v, whole) for k, v in node.items()}
    keys = list(children)
    if keys and all(isinstance(k, int) for k in keys) and sorted(keys) == list(range(len(keys))):
        return [children[i] for i in range(len(keys))]
    strings = {str(k): v for k, v in children.items()}
    if len(strings) != len(children):
        raise ExportError(f"{whole}: keys {keys!r} collide once written as strings")
    return strings


def plain_tree(tree: Any, name: str = "argument") -> PlainTree:
    """Take `tree` apart into a plain tree (see the module's docstring)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_nnx_variable)
    root: dict[str | int, Any] = {}
    paths: list[TreePath] = []
    leaf_defs: list[Any] = []
    bare: Any = None
    for key_path, leaf in flat:
        path: TreePath = tuple(_key_part(k) for k in key_path)
        if _is_nnx_variable(leaf):
            inner, leaf_def = jax.tree.flatten(leaf)
            if len(inner) != 1 or not _is_array(inner[0]):
                raise ExportError(f"{name}/{path_name(path)}: an nnx Variable that is no array")
            value: Any = inner[0]
            spec: Any = leaf_def
        elif _is_array(leaf):
            value, spec = leaf, None
        else:
            leaf_defs.append(("const", leaf))
            continue
        leaf_defs.append(spec)
        paths.append(path)
        if not path:
            bare = value
        else:
            _insert(root, path, value, name)
    plain = bare if paths == [()] else _listify(root, name)
    return PlainTree(plain, tuple(paths), treedef, tuple(leaf_defs))


def plain_state(obj: Any) -> dict[str, Any]:
    """An nnx module or state, an equinox module or any pytree as a dict of arrays with
    string keys, nested by path: what jax.export serializes. The recipe for exporting by
    hand; `boundary export-fn` does the same to every argument and result."""
    tree = plain_tree(obj).plain
    if isinstance(tree, list):
        return {str(i): v for i, v in enumerate(tree)}
    if not isinstance(tree, dict):
        return {"value": tree}
    return tree


def bind_example(function: Callable[..., Any], example: Any) -> dict[str, Any]:
    """The example arguments by parameter name.

    `example` is what the user's example function returned: a tuple (or list) of
    positional arguments, a dict of keyword arguments, or a pair (tuple, dict).
    Positional-only and *args parameters are named by position: `arg0`, `arg1`, …
    """
    if isinstance(example, dict):
        args: tuple[Any, ...] = ()
        kwargs: dict[str, Any] = dict(example)
    elif (
        isinstance(example, tuple)
        and len(example) == 2
        and isinstance(example[0], tuple)
        and isinstance(example[1], dict)
    ):
        args, kwargs = example
    elif isinstance(example, tuple | list):
        args, kwargs = tuple(example), {}
    else:
        args, kwargs = (example,), {}
    signature = inspect.signature(function)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ExportError(f"the example does not fit the function's parameters: {exc}") from None
    named: dict[str, Any] = {}
    position = 0
    for parameter in signature.parameters.values():
        if parameter.name not in bound.arguments:
            continue
        value = bound.arguments[parameter.name]
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            named[f"arg{position}"] = value
            position += 1
        elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            for item in value:
                named[f"arg{position}"] = item
                position += 1
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[parameter.name] = value
    return named


def _positional(example: Any) -> tuple[Any, ...]:
    if isinstance(example, tuple | list):
        return tuple(example)
    raise ExportError("arguments given by position must come as a tuple")


@dataclass
class Exported:
    """The serialized artifact, the Exported it came from, and its header as every side
    reads it (names included)."""

    data: bytes
    exported: Any
    header: ExportHeader
    dims: dict[str, int] = field(default_factory=dict)
    """Each symbolic dimension's value in the example (`--symbolic`)."""
    example: tuple[Any, ...] = ()
    """The example's leaf of each flat argument, in the artifact's order: an array (the
    user's own values) or a ShapeDtypeStruct (a shape only)."""

    def given(self) -> dict[str, Any]:
        """The example's values of the arguments it gives as arrays, by argument name, as
        NumPy arrays of the artifact's dtypes (a float64 array under jax's default
        float32 is what the function was exported for: float32): the run's inputs."""
        from workers.export.rules import numpy_dtype

        given: dict[str, Any] = {}
        header = self.header
        for name, aval, leaf in zip(
            header.argument_names, header.in_avals, self.example, strict=True
        ):
            if isinstance(leaf, jax.ShapeDtypeStruct):
                continue
            try:
                given[name] = np.asarray(leaf).astype(numpy_dtype(aval.dtype), copy=False)
            except (TypeError, ValueError) as exc:
                raise ExportError(
                    f"{name}: its values cannot be the run's input ({exc}): give it as a "
                    "jax.ShapeDtypeStruct, or export with --generated-inputs"
                ) from None
        return given


def _abstract(x: Any) -> Any:
    """A ShapeDtypeStruct for an array leaf, keeping the NamedSharding that a placed array
    (or a ShapeDtypeStruct) carries: that is how a multi-device example sets the mesh."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    sharding = getattr(x, "sharding", None) if isinstance(x, jax.Array) else None
    if not isinstance(sharding, jax.sharding.NamedSharding):
        sharding = None
    dtype = x.dtype if isinstance(x, jax.Array) else np.asarray(x).dtype
    return shape_dtype_struct(np.shape(x), dtype, sharding=sharding)


def readable_convention() -> None:
    """Ask this jax for a calling convention Boundary's workers read, when its own
    default is newer; ExportError when it cannot export one."""
    current = int(cast("int", getattr(jax.config, _CONVENTION)))
    if current in READABLE_CONVENTIONS:
        return
    newest = max(READABLE_CONVENTIONS)
    if current < min(READABLE_CONVENTIONS):
        raise ExportError(
            f"this jax ({jax.__version__}) exports calling convention {current}; Boundary's "
            f"workers read {min(READABLE_CONVENTIONS)} to {newest}: upgrade jax"
        )
    try:
        _config_update(_CONVENTION, newest)
    except (ValueError, AttributeError) as exc:
        raise ExportError(
            f"this jax ({jax.__version__}) cannot export calling convention {newest}, the "
            f"newest Boundary's workers read: {exc}"
        ) from None


def symbolic_specs(
    specs: dict[str, Any], symbolic: dict[str, list[str]] | None
) -> tuple[dict[str, Any], dict[str, int]]:
    """`specs` (argument name → tree of ShapeDtypeStructs) with the leading axis of every
    array of the arguments `symbolic` names made that symbolic dimension (dimension name
    → argument names), and each dimension's value in the example. ExportError naming the
    argument when it has no such axis, or its arrays disagree on its size."""
    if not symbolic:
        return specs, {}
    symbols = dict(zip(symbolic, jax.export.symbolic_shape(", ".join(symbolic)), strict=True))
    values: dict[str, int] = {}
    out = dict(specs)
    for dim, arguments in symbolic.items():
        for argument in arguments:
            if argument not in specs:
                known = ", ".join(specs)
                raise ExportError(f"--symbolic {dim}={argument}: no argument {argument} ({known})")
            leaves = jax.tree.leaves(specs[argument])
            sizes = {leaf.shape[0] for leaf in leaves if leaf.shape}
            if len(sizes) != 1 or any(not leaf.shape for leaf in leaves):
                raise ExportError(
                    f"--symbolic {dim}={argument}: its arrays need one shared leading axis "
                    f"(found sizes {sorted(sizes)})"
                )
            size = sizes.pop()
            if values.setdefault(dim, size) != size:
                raise ExportError(
                    f"--symbolic {dim}: {argument}'s leading axis is {size}, another "
                    f"argument's {values[dim]}; one dimension has one size in the example"
                )
            out[argument] = jax.tree.map(
                lambda leaf, d=symbols[dim]: shape_dtype_struct(
                    (d, *leaf.shape[1:]), leaf.dtype, sharding=leaf.sharding
                ),
                specs[argument],
            )
    return out, values


def export_example(
    function: Callable[..., Any],
    example: Any,
    platforms: Sequence[str] = ("cpu", "cuda", "tpu"),
    *,
    by_name: bool = True,
    symbolic: dict[str, list[str]] | None = None,
) -> Exported:
    """Export `function` for `platforms` from its example arguments (any pytrees).

    With `by_name` the artifact takes keyword arguments named after the function's
    parameters (its flat order is then jax's: sorted by name); without, it takes them
    by position, named `arg0`, `arg1`, … in call order."""
    unknown = [p for p in platforms if p not in PLATFORMS]
    if unknown:
        raise ExportError(
            f"--platforms: {', '.join(unknown)} is no platform ({', '.join(PLATFORMS)})"
        )
    named = bind_example(function, example)
    if not by_name:
        bind_example(function, example)  # the example must still fit the parameters
        named = {f"arg{i}": value for i, value in enumerate(_positional(example))}
    taken = {name: plain_tree(value, name) for name, value in named.items()}
    positional = [n for n in named if n.startswith("arg") and n[3:].isdigit()]

    def call(plain: dict[str, Any]) -> Any:
        values = {name: taken[name].rebuild(plain[name]) for name in plain}
        args = [values.pop(n) for n in positional]
        return plain_tree(function(*args, **values), "result").plain

    def by_keyword(**plain: Any) -> Any:
        return call(plain)

    def by_position(*plain: Any) -> Any:
        return call({f"arg{i}": value for i, value in enumerate(plain)})

    wrapper = by_keyword if by_name else by_position

    # The artifact's function name and every op name (`jit(forward)/dot_general`) follow
    # the user's function, not this wrapper.
    wrapper.__name__ = wrapper.__qualname__ = getattr(function, "__name__", "function")
    specs = {name: jax.tree.map(_abstract, t.plain) for name, t in taken.items()}
    specs, dims = symbolic_specs(specs, symbolic)
    readable_convention()
    export = jax.export.export(jax.jit(wrapper), platforms=list(platforms))
    exported = export(**specs) if by_name else export(*specs.values())
    try:
        data = bytes(exported.serialize())
    except ValueError as exc:
        raise ExportError(f"the artifact cannot be serialized: {exc}") from None
    # The leaves in the order jax flattened the call: keywords sorted by name, positions
    # in order; the artifact's flat arguments are these.
    plains = {name: t.plain for name, t in taken.items()}
    leaves = jax.tree.leaves(plains if by_name else tuple(plains.values()))
    return Exported(data, exported, read_header(data), dims, tuple(leaves))
