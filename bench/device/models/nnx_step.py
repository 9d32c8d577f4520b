"""A user's own flax.nnx training step: the nnx language model of `nnx_forward` trained
with optax's AdamW on next-token prediction. Nothing here knows about Boundary.

`step` takes the model's state as a plain dict, AdamW's state and a batch of tokens (one
longer than the model's context), and returns the loss, the new state and the optimizer's
new state: outputs the size of the model, whatever the batch. A run that draws AdamW's state
needs its second moment drawn positive (bench/device/fit_on_chip.py's RULES).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from bench.device.models.nnx_forward import SEQ, VOCAB, Model

OPTIMIZER = optax.adamw(3e-4)
_GRAPHDEF, _STATE = nnx.split(Model(nnx.Rngs(0)))


def _loss(state: dict[str, Any], tokens: jax.Array) -> jax.Array:
    logits = nnx.merge(_GRAPHDEF, nnx.State(state))(tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def step(state: dict[str, Any], opt_state: Any, tokens: jax.Array) -> Any:
    loss, grads = jax.value_and_grad(_loss)(state, tokens)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, state)
    return loss, optax.apply_updates(state, updates), opt_state


def example(batch: int = 8) -> tuple[Any, Any, Any]:
    """The model's initialized weights, AdamW's fresh state and a batch of tokens."""
    state = nnx.to_pure_dict(_STATE)
    tokens = jnp.asarray(np.random.default_rng(3).integers(0, VOCAB, (batch, SEQ + 1)), jnp.int32)
    return state, OPTIMIZER.init(state), tokens
