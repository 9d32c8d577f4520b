"""A user's own training step, written as a user would: a small f32 transformer decoder
trained with optax's SGD with momentum on a next-token objective. Nothing here knows about
Boundary.

Exported with a symbolic batch (`boundary export-fn … --dim batch`):

    boundary export-fn bench.device.models.transformer_step:step \
        --example bench.device.models.transformer_step:example --symbolic batch ...

`step_changed` is the same step with the output layer's logits scaled by 1.05: a wrong
answer the chip's check must catch when it is judged against `step`'s outputs. (A fresh
Adam state would make the first update sign(g), which flips under any change of rounding
where g is near 0; momentum keeps the update a smooth function of the gradient.)
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

VOCAB, WIDTH, HEADS, LAYERS, SEQ, BATCH = 512, 256, 4, 2, 128, 32
OPTIMIZER = optax.sgd(1e-2, momentum=0.9)


def _norm(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-6) * p["scale"] + p["bias"]


def _block(x: jax.Array, p: dict[str, Any]) -> jax.Array:
    b, s, w = x.shape
    h = _norm(x, p["ln1"])
    q, k, v = ((h @ p[name]).reshape(b, s, HEADS, w // HEADS) for name in ("wq", "wk", "wv"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(w // HEADS)
    mask = jnp.tril(jnp.ones((s, s), bool))
    attn = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
    x = x + jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, s, w) @ p["wo"]
    h = _norm(x, p["ln2"])
    mlp = jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return x + mlp


def loss_fn(params: dict[str, Any], tokens: jax.Array, logit_scale: float = 1.0) -> jax.Array:
    x = params["embed"][tokens[:, :-1]]
    for block in params["blocks"]:
        x = _block(x, block)
    logits = logit_scale * (_norm(x, params["ln_f"]) @ params["embed"].T)
    targets = tokens[:, 1:]
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def _step(params: Any, opt_state: Any, tokens: jax.Array, logit_scale: float) -> Any:
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, logit_scale)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return loss, optax.apply_updates(params, updates), opt_state


step = functools.partial(_step, logit_scale=1.0)
step_changed = functools.partial(_step, logit_scale=1.05)


def init(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ln() -> dict[str, np.ndarray]:
        return {"scale": np.ones(WIDTH, np.float32), "bias": np.zeros(WIDTH, np.float32)}

    blocks = [
        {
            "ln1": ln(), "ln2": ln(),
            "wq": w(WIDTH, WIDTH), "wk": w(WIDTH, WIDTH), "wv": w(WIDTH, WIDTH),
            "wo": w(WIDTH, WIDTH),
            "w1": w(WIDTH, 4 * WIDTH), "b1": np.zeros(4 * WIDTH, np.float32),
            "w2": w(4 * WIDTH, WIDTH), "b2": np.zeros(WIDTH, np.float32),
        }
        for _ in range(LAYERS)
    ]  # fmt: skip
    return {"embed": w(VOCAB, WIDTH), "blocks": blocks, "ln_f": ln()}


def example(batch: int = BATCH) -> tuple[Any, Any, Any]:
    """Real arguments: initialized weights, the optimizer's fresh state, a batch of tokens."""
    params = jax.tree.map(jnp.asarray, init())
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, VOCAB, (batch, SEQ + 1)), jnp.int32)
    return params, OPTIMIZER.init(params), tokens
