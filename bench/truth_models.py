"""The programs bench/memory_truth.py exports when it is given no file: a user's model
file, exported with `boundary export-fn MODULE:FUNCTION --example MODULE:EXAMPLE`.

- `gpt2_forward(params, tokens)`: GPT-2 small's forward (12 layers, width 768, 12 heads,
  a 50,257-token vocabulary, learned positions, tied embedding), float32, its weights a
  nested pytree of dicts and lists (`params/blocks/3/attn/qkv/kernel`); `gpt2_example`
  gives abstract arguments (nothing allocated), batch GPT2_BATCH × GPT2_SEQ tokens.
- `cnn_step(params, images, labels)`: one plain-SGD step of a small CNN classifier;
  `cnn_example` puts the batch on a mesh of 8 devices (axis `data`) and the weights
  replicated, so the step is data-parallel: its gradient is all-reduced.
- `matmul(a, b)`: for the bfloat16 padding check, exported with `--arg`.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

VOCAB, WIDTH, LAYERS, HEADS, CONTEXT = 50_257, 768, 12, 12, 1024
GPT2_BATCH, GPT2_SEQ = 4, 512
CNN_DEVICES, CNN_BATCH, CNN_IMAGE, CNN_CLASSES = 8, 256, 32, 10


def _layer_norm(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]


def _dense(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    return x @ p["kernel"] + p["bias"]


def _attention(x: jax.Array, p: dict[str, Any]) -> jax.Array:
    batch, seq, width = x.shape
    head = width // HEADS
    qkv = _dense(x, p["qkv"]).reshape(batch, seq, 3, HEADS, head)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head)
    causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    scores = jnp.where(causal, scores, jnp.float32(-1e30))
    mixed = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return _dense(mixed.reshape(batch, seq, width), p["proj"])


def gpt2_forward(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
    """Logits float32[batch, seq, VOCAB] of int32 token ids [batch, seq]."""
    seq = tokens.shape[1]
    x = params["wte"]["embedding"][tokens] + params["wpe"]["embedding"][:seq]
    for block in params["blocks"]:
        x = x + _attention(_layer_norm(x, block["ln_1"]), block["attn"])
        hidden = jax.nn.gelu(_dense(_layer_norm(x, block["ln_2"]), block["mlp"]["fc"]))
        x = x + _dense(hidden, block["mlp"]["proj"])
    x = _layer_norm(x, params["ln_f"])
    logits: jax.Array = x @ params["wte"]["embedding"].T
    return logits


def gpt2_example() -> tuple[dict[str, Any], jax.ShapeDtypeStruct]:
    """Abstract GPT-2 small weights and a GPT2_BATCH × GPT2_SEQ batch of token ids."""

    def f32(*shape: int) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.float32)

    def dense(fan_in: int, fan_out: int) -> dict[str, Any]:
        return {"kernel": f32(fan_in, fan_out), "bias": f32(fan_out)}

    def norm() -> dict[str, Any]:
        return {"scale": f32(WIDTH), "bias": f32(WIDTH)}

    block = {
        "ln_1": norm(),
        "attn": {"qkv": dense(WIDTH, 3 * WIDTH), "proj": dense(WIDTH, WIDTH)},
        "ln_2": norm(),
        "mlp": {"fc": dense(WIDTH, 4 * WIDTH), "proj": dense(4 * WIDTH, WIDTH)},
    }
    params = {
        "wte": {"embedding": f32(VOCAB, WIDTH)},
        "wpe": {"embedding": f32(CONTEXT, WIDTH)},
        "blocks": [block for _ in range(LAYERS)],
        "ln_f": norm(),
    }
    return params, jax.ShapeDtypeStruct((GPT2_BATCH, GPT2_SEQ), jnp.int32)


def _cnn_logits(params: dict[str, Any], images: jax.Array) -> jax.Array:
    x = images
    for conv in params["convs"]:
        x = jax.lax.conv_general_dilated(
            x, conv["kernel"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        x = jax.nn.relu(x + conv["bias"])
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(_dense(x, params["head"]["hidden"]))
    return _dense(x, params["head"]["out"])


def cnn_loss(params: dict[str, Any], images: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of the integer labels."""
    logp = jax.nn.log_softmax(_cnn_logits(params, images))
    picked = jnp.take_along_axis(logp, labels[:, None], axis=-1)
    return -jnp.mean(picked)


def cnn_step(params: dict[str, Any], images: jax.Array, labels: jax.Array) -> tuple[Any, Any]:
    """One SGD step: (loss, new params)."""
    loss, grads = jax.value_and_grad(cnn_loss)(params, images, labels)
    return loss, jax.tree.map(lambda w, g: w - 0.01 * g, params, grads)


def cnn_example() -> tuple[Any, ...]:
    """Seeded weights replicated and a batch split over a mesh of CNN_DEVICES."""
    devices = jax.devices()
    if len(devices) < CNN_DEVICES:
        raise RuntimeError(f"needs {CNN_DEVICES} devices: export with --devices {CNN_DEVICES}")
    rng = np.random.default_rng(0)

    def weights(*shape: int) -> jax.Array:
        fan_in = math.prod(shape[:-1])
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) / math.sqrt(fan_in))

    channels = [3, 64, 128, 256]
    convs = [
        {"kernel": weights(3, 3, cin, cout), "bias": jnp.zeros((cout,), jnp.float32)}
        for cin, cout in itertools.pairwise(channels)
    ]
    flat = (CNN_IMAGE // 8) ** 2 * channels[-1]
    head = {
        "hidden": {"kernel": weights(flat, 512), "bias": jnp.zeros((512,), jnp.float32)},
        "out": {"kernel": weights(512, CNN_CLASSES), "bias": jnp.zeros((CNN_CLASSES,))},
    }
    images = rng.standard_normal((CNN_BATCH, CNN_IMAGE, CNN_IMAGE, 3), dtype=np.float32)
    labels = rng.integers(0, CNN_CLASSES, size=(CNN_BATCH,), dtype=np.int32)
    mesh = jax.sharding.Mesh(np.array(devices[:CNN_DEVICES]), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    return (
        jax.device_put({"convs": convs, "head": head}, replicated),
        jax.device_put(jnp.asarray(images), batch),
        jax.device_put(jnp.asarray(labels), batch),
    )


def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    """a @ b: exported in bfloat16 at a tile multiple and off one."""
    out: jax.Array = a @ b
    return out
