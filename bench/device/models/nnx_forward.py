"""A user's own flax.nnx model: a small decoder-only language model whose parameters are
nested nnx modules (an embedding, a list of blocks with multi-head attention and an MLP,
layer norms). The forward pass returns logits. Nothing here knows about Boundary.

`forward` takes the model's state as a plain dict (what jax.export serializes) and the
tokens; `forward_changed` scales the output layer's logits by 1.05.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

VOCAB, WIDTH, HEADS, LAYERS, SEQ, BATCH = 1024, 256, 4, 3, 128, 16


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.ln1 = nnx.LayerNorm(WIDTH, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads=HEADS, in_features=WIDTH, decode=False, rngs=rngs
        )
        self.ln2 = nnx.LayerNorm(WIDTH, rngs=rngs)
        self.up = nnx.Linear(WIDTH, 4 * WIDTH, rngs=rngs)
        self.down = nnx.Linear(4 * WIDTH, WIDTH, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        mask = nnx.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.blocks = nnx.List([Block(rngs) for _ in range(LAYERS)])
        self.ln_f = nnx.LayerNorm(WIDTH, rngs=rngs)

    def __call__(self, tokens: jax.Array, logit_scale: float = 1.0) -> jax.Array:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return logit_scale * self.embed.attend(self.ln_f(x))


_GRAPHDEF, _STATE = nnx.split(Model(nnx.Rngs(0)))


def _forward(state: dict[str, Any], tokens: jax.Array, logit_scale: float) -> jax.Array:
    model = nnx.merge(_GRAPHDEF, nnx.State(state))
    return model(tokens, logit_scale)


forward = functools.partial(_forward, logit_scale=1.0)
forward_changed = functools.partial(_forward, logit_scale=1.05)


def example(batch: int = BATCH) -> tuple[Any, Any]:
    """The model's own initialized weights (nested, as a plain dict) and a batch of tokens."""
    state = nnx.to_pure_dict(_STATE)
    tokens = jnp.asarray(np.random.default_rng(2).integers(0, VOCAB, (batch, SEQ)), jnp.int32)
    return state, tokens
