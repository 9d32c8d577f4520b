"""Compile one small program for a compiler with every option on its list at its extremes.

Run by tests/workers/test_compiler_options.py in a child process (`python option_probe.py
XLA:GPU`), because a bad value can abort the whole process: it prints a "trying" line
before each compile, so the last one names the culprit. Round r gives every option its
r-th extreme value (both bools, every choice, both bounds), so a compiler's whole list
takes a handful of compiles; a round the compiler refuses is tried again one option at a
time, so the answer names the option.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.compiler.jaxenv import apply_jax_environment

apply_jax_environment()  # before jax is imported: JAX_PLATFORMS=cpu and libtpu's settings

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from workers.protocol import parse_target  # noqa: E402
from workers.protocol.compiler_options import OptionValue, check_options  # noqa: E402
from workers.protocol.option_lists import ALLOWED, Compiler, OptionSpec  # noqa: E402
from workers.xla_targets.topology import target_devices  # noqa: E402

PROBE_TARGET = {Compiler.XLA_CPU: None, Compiler.XLA_GPU: "b200:2", Compiler.LIBTPU: "v6e:2x2"}
"""Where each compiler's options are tried: two or more devices, so collectives appear."""


def extremes(spec: OptionSpec) -> list[Any]:
    """The values that exercise an option, as a job's JSON gives them."""
    if spec.kind == "bool":
        return [True, False]
    if spec.kind == "switch":
        return ["auto", "true", "false"]
    if spec.kind == "enum":
        return list(spec.choices)
    return [spec.minimum, spec.maximum]


def lowered_program(compiler: Compiler) -> Any:
    """A sharded matmul with a reduction and an elementwise tail (CPU: one device)."""
    target = PROBE_TARGET[compiler]
    devices = (
        jax.devices("cpu")[:1] if target is None else list(target_devices(parse_target(target)))
    )
    mesh = Mesh(np.array(devices), ("x",))
    rows = NamedSharding(mesh, PartitionSpec("x", None))
    cols = NamedSharding(mesh, PartitionSpec(None, "x"))
    a = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16, sharding=rows)
    b = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16, sharding=cols)

    def program(x: jax.Array, y: jax.Array) -> jax.Array:
        product = x @ y
        return jnp.tanh(product) + product.sum(axis=0, keepdims=True)

    return jax.jit(program, out_shardings=cols).lower(a, b)


def attempt(lowered: Any, options: dict[str, OptionValue]) -> str:
    print(json.dumps({"trying": sorted(options)}), flush=True)
    jax.clear_caches()
    try:
        lowered.compile(compiler_options=options)
    except Exception as exc:  # noqa: BLE001 - the compiler's refusal is the finding
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return "compiled"


def main(compiler: Compiler) -> None:
    lowered = lowered_program(compiler)
    lowered.compile()  # the compiler's start-up, before any option
    specs = list(ALLOWED[compiler].values())
    rounds = max(len(extremes(s)) for s in specs)
    for r in range(rounds):
        options: dict[str, OptionValue] = {}
        for spec in specs:
            values = extremes(spec)
            options.update(check_options({spec.name: values[r % len(values)]}, compiler))
        answer = attempt(lowered, options)
        if answer == "compiled":
            print(json.dumps({"options": sorted(options), "answer": answer}), flush=True)
            continue
        for name, value in options.items():  # which one: alone, one at a time
            alone = attempt(lowered, {name: value})
            shown = f"{name}={value}: {alone}"
            print(json.dumps({"options": [name], "answer": alone, "value": shown}), flush=True)


if __name__ == "__main__":
    main(Compiler(sys.argv[1]))
