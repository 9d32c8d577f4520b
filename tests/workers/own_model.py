"""A model of our own, standing in for a user's: exported with `boundary export-fn
--example`, as a user exports theirs. Small enough to export and compile in seconds.

- `forward(params, tokens)`: a one-block decoder-only transformer; its weights are nested
  dicts and lists (`params/blocks/0/attn/key/kernel`), its input int32 token ids.
- `train_step(params, opt_state, tokens)`: next-token cross-entropy, its gradient and one
  optax adamw update; it returns the loss, the new weights and the new optimizer state
  (optax's own named tuples).
- the same step data-parallel over 8 devices: `dp_example()` puts the batch on a mesh of 8
  (axis `data`) and the rest replicated, so the export records `nr_devices == 8`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

VOCAB = 64
WIDTH = 32
HEADS = 2
SEQ = 16
BATCH = 8
DP_DEVICES = 8

Params = dict[str, Any]


def init_params(seed: int = 0) -> Params:
    """Seeded weights: an embedding, one block of attention and MLP, a final norm."""
    rng = np.random.default_rng(seed)

    def dense(fan_in: int, fan_out: int, bias: bool = False) -> dict[str, jax.Array]:
        weights = rng.standard_normal((fan_in, fan_out), dtype=np.float32) / math.sqrt(fan_in)
        layer = {"kernel": jnp.asarray(weights)}
        if bias:
            layer["bias"] = jnp.zeros((fan_out,), jnp.float32)
        return layer

    block = {
        "ln1": {"scale": jnp.ones((WIDTH,), jnp.float32)},
        "attn": {name: dense(WIDTH, WIDTH) for name in ("query", "key", "value", "out")},
        "ln2": {"scale": jnp.ones((WIDTH,), jnp.float32)},
        "mlp": {"fc": dense(WIDTH, 4 * WIDTH, True), "proj": dense(4 * WIDTH, WIDTH, True)},
    }
    embedding = rng.standard_normal((VOCAB, WIDTH), dtype=np.float32) * 0.02
    return {
        "embed": {"embedding": jnp.asarray(embedding)},
        "blocks": [block],
        "ln_f": {"scale": jnp.ones((WIDTH,), jnp.float32)},
    }


def example_tokens(seed: int = 1) -> jax.Array:
    """Token ids in [0, VOCAB), int32[BATCH, SEQ]."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(0, VOCAB, size=(BATCH, SEQ), dtype=np.int32))


def _norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    mean_square = jnp.mean(x * x, axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(mean_square + 1e-6) * scale


def _attention(block: Params, x: jax.Array) -> jax.Array:
    batch, seq, width = x.shape
    head = width // HEADS

    def heads(name: str) -> jax.Array:
        projected = x @ block["attn"][name]["kernel"]
        split: jax.Array = projected.reshape(batch, seq, HEADS, head).transpose(0, 2, 1, 3)
        return split

    q, k, v = heads("query"), heads("key"), heads("value")
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head)
    causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    scores = jnp.where(causal, scores, jnp.float32(-1e30))
    mixed = jax.nn.softmax(scores, axis=-1) @ v
    merged = mixed.transpose(0, 2, 1, 3).reshape(batch, seq, width)
    out: jax.Array = merged @ block["attn"]["out"]["kernel"]
    return out


def _mlp(block: Params, x: jax.Array) -> jax.Array:
    fc, proj = block["mlp"]["fc"], block["mlp"]["proj"]
    hidden = jax.nn.gelu(x @ fc["kernel"] + fc["bias"])
    out: jax.Array = hidden @ proj["kernel"] + proj["bias"]
    return out


def forward(params: Params, tokens: jax.Array) -> jax.Array:
    """Logits float32[batch, seq, VOCAB] for int32 token ids [batch, seq]."""
    x = params["embed"]["embedding"][tokens]
    for block in params["blocks"]:
        x = x + _attention(block, _norm(x, block["ln1"]["scale"]))
        x = x + _mlp(block, _norm(x, block["ln2"]["scale"]))
    x = _norm(x, params["ln_f"]["scale"])
    logits: jax.Array = x @ params["embed"]["embedding"].T
    return logits


def forward_example() -> tuple[Params, jax.Array]:
    return init_params(), example_tokens()


OPTIMIZER = optax.adamw(1e-3)


def loss_fn(params: Params, tokens: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy."""
    logits = forward(params, tokens[:, :-1])
    loss: jax.Array = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
    return loss


def train_step(params: Params, opt_state: Any, tokens: jax.Array) -> tuple[Any, ...]:
    """One adamw step: (loss, new params, new optimizer state)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, new_state = OPTIMIZER.update(grads, opt_state, params)
    return loss, optax.apply_updates(params, updates), new_state


def train_example() -> tuple[Params, Any, jax.Array]:
    params = init_params()
    return params, OPTIMIZER.init(params), example_tokens()


def dp_example() -> tuple[Any, ...]:
    """`train_example()` on a mesh of 8: the batch split over `data`, the rest replicated
    (Auto axes: jax.make_mesh would make them Explicit, which exports as well)."""
    devices = jax.devices()
    if len(devices) < DP_DEVICES:
        raise RuntimeError(f"needs {DP_DEVICES} devices: export with --devices {DP_DEVICES}")
    mesh = jax.sharding.Mesh(np.array(devices[:DP_DEVICES]), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    params, opt_state, tokens = train_example()
    return (
        jax.device_put(params, replicated),
        jax.device_put(opt_state, replicated),
        jax.device_put(tokens, batch),
    )


TRAIN_RULES = {
    "params/*": {"kind": "normal", "scale": 0.05},
    "tokens": {"kind": "int", "low": 0, "high": VOCAB},
    "opt_state/*": {"kind": "zeros"},
    "opt_state/0/nu/*": {"kind": "positive"},
}
"""Inputs a train step can take: small weights, token ids, zero moments and a positive
second moment (adamw takes its square root)."""

FORWARD_RULES = {
    "params/*": {"kind": "normal", "scale": 0.05},
    "params/ln_f/scale": {"kind": "ones"},
    "tokens": {"kind": "int", "low": 0, "high": VOCAB},
}
