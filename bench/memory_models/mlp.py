"""A plain-JAX MLP's training step, written as a user writes one: four dense layers
(1,024 → 4,096 → 4,096 → 4,096 → 1,024), squared error, plain SGD, its weights a list of
dicts (`params/2/w`). Exported once with a symbolic batch,
`boundary export-fn mlp.py:train_step --example mlp.py:example --symbolic b=x,y`, and
compiled at b=1, 8 and 1024.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp

SIZES = (1_024, 4_096, 4_096, 4_096, 1_024)
BATCH = 8
LEARNING_RATE = 1e-3

Params = list[dict[str, jax.Array]]


def predict(params: Params, x: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_of(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((predict(params, x) - y) ** 2)


def train_step(params: Params, x: jax.Array, y: jax.Array) -> tuple[jax.Array, Params]:
    """One SGD step: (loss, new params)."""
    loss, grads = jax.value_and_grad(loss_of)(params, x, y)
    return loss, jax.tree.map(lambda w, g: w - LEARNING_RATE * g, params, grads)


def example() -> tuple[Params, jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
    """Abstract weights, and a batch of BATCH inputs and targets."""
    f32 = jnp.float32
    params = [
        {"w": jax.ShapeDtypeStruct((n, m), f32), "b": jax.ShapeDtypeStruct((m,), f32)}
        for n, m in itertools.pairwise(SIZES)
    ]
    x = jax.ShapeDtypeStruct((BATCH, SIZES[0]), jnp.float32)
    y = jax.ShapeDtypeStruct((BATCH, SIZES[-1]), jnp.float32)
    return params, x, y
