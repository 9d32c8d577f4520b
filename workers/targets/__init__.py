"""Compiling for a target without its hardware ("deviceless" ahead-of-time compilation).

XLA builds the real program for a TPU v6e slice (through libtpu and the slice's topology)
or for NVIDIA GPUs (through JAX's CUDA plugin and the GPU model's target description in
`gpu/`), with no such device present. What comes back is the compiler's own output:
optimized HLO with the target's layouts, fusions, library calls and collectives, PTX for
the GPU's kernels, memory per device. Nothing compiled this way can run here.
"""
