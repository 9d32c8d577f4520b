"""A flax nnx decoder-only transformer's forward pass, written as a user writes one: its
parameters are nnx modules nested in blocks (`model/blocks/3/attn/qkv/kernel`), exported
with `boundary export-fn transformer_nnx.py:forward --example transformer_nnx.py:example`.

Width 512, 6 blocks of 8-head causal attention and a 4× MLP, a 16,384-token vocabulary,
float32; a batch of 8 × 256 token ids. The example builds the module abstractly
(`nnx.eval_shape`), so nothing is allocated and every weight is drawn by the runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

VOCAB, WIDTH, BLOCKS, HEADS, CONTEXT = 16_384, 512, 6, 8, 1_024
BATCH, SEQ = 8, 256


class Attention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.qkv = nnx.Linear(WIDTH, 3 * WIDTH, rngs=rngs)
        self.proj = nnx.Linear(WIDTH, WIDTH, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq, _ = x.shape
        head = WIDTH // HEADS
        q, k, v = jnp.split(self.qkv(x).reshape(batch, seq, 3 * HEADS, head), 3, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(head))
        causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, -1e30), axis=-1)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, WIDTH)
        return self.proj(mixed)


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.ln_1 = nnx.LayerNorm(WIDTH, rngs=rngs)
        self.attn = Attention(rngs)
        self.ln_2 = nnx.LayerNorm(WIDTH, rngs=rngs)
        self.fc = nnx.Linear(WIDTH, 4 * WIDTH, rngs=rngs)
        self.out = nnx.Linear(4 * WIDTH, WIDTH, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln_1(x))
        return x + self.out(jax.nn.gelu(self.fc(self.ln_2(x))))


class Transformer(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.wte = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.wpe = nnx.Embed(CONTEXT, WIDTH, rngs=rngs)
        self.blocks = nnx.List([Block(rngs) for _ in range(BLOCKS)])
        self.ln_f = nnx.LayerNorm(WIDTH, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        positions = jnp.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.wte.attend(self.ln_f(x))


def forward(model: Transformer, tokens: jax.Array) -> jax.Array:
    """Logits float32[batch, seq, VOCAB] of int32 token ids [batch, seq]."""
    return model(tokens)


def example() -> tuple[Transformer, jax.ShapeDtypeStruct]:
    """The module built abstractly, and a BATCH × SEQ batch of token ids."""
    model = nnx.eval_shape(lambda: Transformer(nnx.Rngs(0)))
    return model, jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32)
