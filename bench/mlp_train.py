"""A user's model file for the fit searches' acceptance run (bench/fit_confirm.py): one
training step of a 4-layer MLP classifier, forward, backward and an Adam update, exported
the way a user exports theirs, with a symbolic batch:

    cd bench && ../.venv/bin/boundary export-fn mlp_train:step --example mlp_train:example \\
        --symbolic b=x,y --generated-inputs --no-source -o mlp_train.jaxexport

Widths 784 → 16,384 → 16,384 → 16,384 → 10 in float32: about 13 GB of weights, Adam's
moments and the update at any batch, and about 200 kB more per example, so the largest
batch that fits lies inside 1 … 1,048,576 on an H100 (about 234 thousand) and on a B200
(about 609 thousand).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

SIZES = (784, 16_384, 16_384, 16_384, 10)
EXAMPLE_BATCH = 32
LEARNING_RATE, BETA1, BETA2, EPSILON = 1e-3, 0.9, 0.999, 1e-8

Params = list[dict[str, jax.Array]]


def init(key: jax.Array) -> Params:
    """Each layer's weights (scaled normal) and biases (zeros)."""
    keys = jax.random.split(key, len(SIZES) - 1)
    return [
        {
            "w": jax.random.normal(k, (m, n), jnp.float32) * m**-0.5,
            "b": jnp.zeros((n,), jnp.float32),
        }
        for k, m, n in zip(keys, SIZES[:-1], SIZES[1:], strict=True)
    ]


def loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean cross-entropy of the labels `y` under the MLP's logits of `x`."""
    h = x
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    logits = h @ params[-1]["w"] + params[-1]["b"]
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)
    return -jnp.mean(picked)


def step(
    params: Params, adam: dict[str, Any], x: jax.Array, y: jax.Array
) -> tuple[jax.Array, Params, dict[str, Any]]:
    """One Adam step: (loss, new params, new Adam state: moments `m`, `v` and `count`)."""
    value, grads = jax.value_and_grad(loss)(params, x, y)
    count = adam["count"] + 1
    m = jax.tree.map(lambda a, g: BETA1 * a + (1 - BETA1) * g, adam["m"], grads)
    v = jax.tree.map(lambda a, g: BETA2 * a + (1 - BETA2) * g * g, adam["v"], grads)
    unbias1, unbias2 = 1 - BETA1**count, 1 - BETA2**count

    def update(p: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
        return p - LEARNING_RATE * (a / unbias1) / (jnp.sqrt(b / unbias2) + EPSILON)

    return value, jax.tree.map(update, params, m, v), {"m": m, "v": v, "count": count}


def example() -> tuple[Any, ...]:
    """The step's arguments at a batch of EXAMPLE_BATCH, as shapes (nothing allocated:
    the weights alone are 2 GB): export-fn makes the batch of `x` and `y` symbolic
    (`--symbolic b=x,y`)."""
    params = jax.eval_shape(init, jax.random.key(0))
    adam = {"m": params, "v": params, "count": jax.ShapeDtypeStruct((), jnp.float32)}
    x = jax.ShapeDtypeStruct((EXAMPLE_BATCH, SIZES[0]), jnp.float32)
    y = jax.ShapeDtypeStruct((EXAMPLE_BATCH,), jnp.int32)
    return (params, adam, x, y)
