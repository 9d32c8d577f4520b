"""Pallas kernels for the catalog's workloads: JAX's own kernel language, on every
compiler Pallas has.

- `matmul`: a tiled matmul with a float32 accumulator (ours) on Mosaic TPU and Triton;
  jax's bundled Mosaic GPU matmuls (`hopper_matmul_mgpu`, wgmma; `blackwell_matmul_mgpu`,
  tcgen05); and the same kernel on each device's shards inside `jax.shard_map`.
- `ops`: the elementwise chain as one kernel over rows of 128 (ours), and flash attention
  through jax's shipped kernels (`ops.tpu.flash_attention`, `ops.gpu.attention.mha`,
  `ops.gpu.attention_mgpu`), not one of ours.
- `lowering`: what lowering a Mosaic GPU kernel needs without the device (the target's
  compute capability, the abstract mesh), and one Mosaic GPU architecture per process.

Which compiler and which block sizes a job gets is the catalog's decision
(`workers.catalog.kernels.choose_kernel`, jax-free, so the server refuses the same jobs).
"""
