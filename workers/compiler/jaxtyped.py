"""Typed doors into the few jax functions whose annotations mypy strict cannot follow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import jax

config_update = cast("Callable[[str, object], None]", jax.config.update)
"""jax.config.update: set a configuration option by name."""

clear_caches = cast("Callable[[], None]", jax.clear_caches)
"""jax.clear_caches: drop every in-memory trace, lowering and executable cache."""

shape_dtype_struct = cast("Callable[..., Any]", jax.ShapeDtypeStruct)
"""jax.ShapeDtypeStruct: an abstract argument (shape, dtype, sharding) to trace with."""


def config_value(name: str) -> object:
    """The current value of the jax configuration option `name`."""
    return cast(object, getattr(jax.config, name))
