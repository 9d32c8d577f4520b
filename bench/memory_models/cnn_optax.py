"""An optax training step of a small CNN classifier, data-parallel over 8 devices, written
as a user writes one and exported with `boundary export-fn cnn_optax.py:train_step
--example cnn_optax.py:example --devices 8`.

Three 3×3 convolutions (64, 128, 256 channels) with max-pooling, a 512-wide hidden layer
and 10 classes; Adam from optax. The example splits a batch of 256 32×32 images over a
mesh of 8 devices (axis `data`) and replicates the weights and the optimizer state, so the
step's gradient is all-reduced; it gives them abstractly, so nothing is allocated and the
runs draw every input.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

DEVICES, BATCH, IMAGE, CLASSES = 8, 256, 32, 10
CHANNELS = (3, 64, 128, 256)
OPTIMIZER = optax.adam(1e-3)

Params = dict[str, Any]


def conv_block(x: jax.Array, layer: Params) -> jax.Array:
    x = jax.lax.conv_general_dilated(
        x, layer["kernel"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    x = jax.nn.relu(x + layer["bias"])
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def logits_of(params: Params, images: jax.Array) -> jax.Array:
    x = images
    for layer in params["convs"]:
        x = conv_block(x, layer)
    x = x.reshape(x.shape[0], -1)
    hidden = jax.nn.relu(x @ params["hidden"]["kernel"] + params["hidden"]["bias"])
    out: jax.Array = hidden @ params["out"]["kernel"] + params["out"]["bias"]
    return out


def loss_of(params: Params, images: jax.Array, labels: jax.Array) -> jax.Array:
    logits = logits_of(params, images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def train_step(
    params: Params, opt_state: Any, images: jax.Array, labels: jax.Array
) -> tuple[jax.Array, Params, Any]:
    """One Adam step: (loss, new params, new optimizer state)."""
    loss, grads = jax.value_and_grad(loss_of)(params, images, labels)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return loss, optax.apply_updates(params, updates), opt_state


def init_params(seed: int = 0) -> Params:
    rng = np.random.default_rng(seed)

    def dense(*shape: int) -> dict[str, jax.Array]:
        kernel = rng.standard_normal(shape, dtype=np.float32) / math.sqrt(math.prod(shape[:-1]))
        return {"kernel": jnp.asarray(kernel), "bias": jnp.zeros(shape[-1:], jnp.float32)}

    flat = (IMAGE // 8) ** 2 * CHANNELS[-1]
    return {
        "convs": [dense(3, 3, cin, cout) for cin, cout in itertools.pairwise(CHANNELS)],
        "hidden": dense(flat, 512),
        "out": dense(512, CLASSES),
    }


def example() -> tuple[Any, ...]:
    """Weights and Adam's state replicated, a batch of images and labels split 8 ways,
    all abstract (`jax.eval_shape`, placed with their shardings): nothing is allocated."""
    devices = jax.devices()
    if len(devices) < DEVICES:
        raise RuntimeError(f"needs {DEVICES} devices: export with --devices {DEVICES}")
    mesh = jax.sharding.Mesh(np.array(devices[:DEVICES]), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))

    def placed(tree: Any, sharding: jax.sharding.Sharding) -> Any:
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree
        )

    params = jax.eval_shape(init_params)
    return (
        placed(params, replicated),
        placed(jax.eval_shape(OPTIMIZER.init, params), replicated),
        placed(jax.ShapeDtypeStruct((BATCH, IMAGE, IMAGE, CHANNELS[0]), jnp.float32), split),
        placed(jax.ShapeDtypeStruct((BATCH,), jnp.int32), split),
    )
