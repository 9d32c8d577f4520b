"""The direct CUDA path: hand-written CUDA C++ kernels compiled, inspected and run.

- `plan`: which kernel in `kernels/` serves a workload's parameters, and how to launch it.
- `build`: nvcc (or NVRTC) to PTX and cubin, cached by source hash and architecture.
- `sass`: SASS disassembled from the cubin, and the resource report (registers, spills).
- `env`: what this machine has (compiler, disassembler, GPU) and the GPU environment record.
- `job`: a `cuda` job through its compile and execute stages, as one run.
- `launch`: execution through CuPy (imported only when a GPU run happens).
- `ffi`: the XLA FFI handler that JAX calls, built where it runs.

Nothing here imports CuPy at module level: a machine without a GPU can compile and
inspect every kernel.
"""
