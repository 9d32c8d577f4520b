"""XLA's view of a target without its hardware ("deviceless" ahead-of-time compilation).

XLA builds the real program for a TPU slice (v4, v5e, v5p, v6e, TPU7x; through libtpu and
the slice's topology)
or for NVIDIA GPUs (through JAX's CUDA plugin and the GPU model's target description in
`gpu/`), with no such device present. What comes back is the compiler's own output:
optimized HLO with the target's layouts, fusions, library calls and collectives, PTX for
the GPU's kernels, memory per device. Nothing compiled this way can run here.

Here: the devices of a target as the compiler sees them (`topology`, with the GPU target
descriptions in `gpu/`), what libtpu makes available to a program on a TPU target
(`capacity`) and the PTX of XLA's kernels read from a dump (`ptx_dump`). The
runner that compiles a job this way is `workers.run.deviceless`.
"""
