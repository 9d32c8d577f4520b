"""Why generated inputs are drawn at N(0, 0.02²): the check's relative error ‖out − ref‖ /
‖ref‖ of a transformer forward whose every product runs as one bf16 pass (float32
accumulation, what a TPU does with a DEFAULT-precision float32 dot), against the same
forward in float64, with its weights drawn standard normal and drawn by the default rule,
side by side in one run.

The program is the tests' own one-block decoder (tests/workers/own_model.py) with its
products written out so that they can be rounded to bf16 on this CPU; the weights come from
`workers.export.rules.generate`, the draw a worker makes, over several seeds; the token
ids are the model's example.

    .venv/bin/python bench/input_scale.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workers.compiler.jaxenv import apply_jax_environment  # noqa: E402

apply_jax_environment()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from tests.workers import own_model  # noqa: E402
from workers.export.header import path_name  # noqa: E402
from workers.export.rules import ArgumentSpec, generate  # noqa: E402

SCALES = {
    "standard normal, N(0, 1)": {"*": {"kind": "normal"}},
    "the default draw, N(0, 0.02²)": {},
}


def forward(one_pass: bool) -> Callable[..., Any]:
    """own_model.forward with each product in one bf16 pass, or at the inputs' precision."""

    def mm(a: Any, b: Any) -> Any:
        if not one_pass:
            return a @ b
        low = jnp.bfloat16
        return jnp.matmul(a.astype(low), b.astype(low), preferred_element_type=jnp.float32)

    def attention(block: Any, x: Any) -> Any:
        batch, seq, width = x.shape
        head = width // own_model.HEADS

        def heads(name: str) -> Any:
            projected = mm(x, block["attn"][name]["kernel"])
            return projected.reshape(batch, seq, own_model.HEADS, head).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = mm(q, k.transpose(0, 1, 3, 2)) / math.sqrt(head)
        scores = jnp.where(jnp.tril(jnp.ones((seq, seq), dtype=bool)), scores, -1e30)
        mixed = mm(jax.nn.softmax(scores, axis=-1), v)
        merged = mixed.transpose(0, 2, 1, 3).reshape(batch, seq, width)
        return mm(merged, block["attn"]["out"]["kernel"])

    def mlp(block: Any, x: Any) -> Any:
        fc, proj = block["mlp"]["fc"], block["mlp"]["proj"]
        return mm(jax.nn.gelu(mm(x, fc["kernel"]) + fc["bias"]), proj["kernel"]) + proj["bias"]

    def norm(x: Any, scale: Any) -> Any:
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale

    def run(params: Any, tokens: Any) -> Any:
        x = params["embed"]["embedding"][tokens]
        for block in params["blocks"]:
            x = x + attention(block, norm(x, block["ln1"]["scale"]))
            x = x + mlp(block, norm(x, block["ln2"]["scale"]))
        return mm(norm(x, params["ln_f"]["scale"]), params["embed"]["embedding"].T)

    return jax.jit(run)


def errors(rules: dict[str, Any], seeds: int) -> list[float]:
    """The relative error of the one-pass forward, per seed of the weights' draw."""
    jax.config.update("jax_enable_x64", True)
    example = own_model.init_params()
    leaves, structure = jax.tree_util.tree_flatten_with_path(example)
    names = [
        path_name(tuple(getattr(k, "key", getattr(k, "idx", k)) for k in p)) for p, _ in leaves
    ]
    specs = [
        ArgumentSpec(n, tuple(a.shape), "float32") for n, (_, a) in zip(names, leaves, strict=True)
    ]
    tokens = own_model.example_tokens()
    one_pass, exact = forward(True), forward(False)
    found = []
    for seed in range(seeds):
        drawn = [jnp.asarray(a) for a in generate(specs, rules, seed)]
        params = jax.tree.unflatten(structure, drawn)
        wide = jax.tree.map(lambda a: a.astype(jnp.float64), params)
        ref = np.asarray(exact(wide, tokens))
        out = np.asarray(one_pass(params, tokens), dtype=np.float64)
        found.append(float(np.linalg.norm(out - ref) / np.linalg.norm(ref)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    for label, rules in SCALES.items():
        found = errors(rules, args.seeds)
        print(
            f"{label}: relative error median {statistics.median(found):.2%} "
            f"(from {min(found):.2%} to {max(found):.2%}, {args.seeds} seeds)"
        )


if __name__ == "__main__":
    main()
