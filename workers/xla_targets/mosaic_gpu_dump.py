"""Mosaic GPU's own dumps of a compile: each kernel's PTX, ptxas report and MLIR passes.

Mosaic GPU compiles its kernels inside the custom call, outside XLA's dump (XLA's `.ptx`
file for it is empty), and writes what `MOSAIC_GPU_DUMP_*` asks for into
`MOSAIC_GPU_DUMP_TO` only at the first kernel compile of a process: so the compile runs in
a child (`dump_child`). Per kernel: `kernel_0.ptx`, `kernel_0.ptxas` and
`kernel_0.mlir-passes.log` (about 32 "IR Dump Before" blocks). `MOSAIC_GPU_DUMP_LLVM=1`
aborts the process: it is never set.

Mosaic GPU runs `ptxas` from PATH (else /usr/local/cuda/bin); the child starts with the
nvidia-cuda-nvcc wheel's bin folder first on PATH (`workers.compiler.jaxenv`), so the
kernel XLA would build and the SASS shown come from the same ptxas.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from workers.compiler.jaxenv import nvidia_cuda_root
from workers.xla_targets.dump_child import ChildCompile, Placement, compile_in_child
from workers.xla_targets.kernel_passes import split_ir_dump
from workers.xla_targets.tpu_dump import PassStep

DUMP_ENV = {
    "MOSAIC_GPU_DUMP_PTX": "1",
    "MOSAIC_GPU_DUMP_PTXAS": "1",
    "MOSAIC_GPU_DUMP_MLIR_PASSES": "1",
}


@dataclass
class MosaicGpuDump:
    """What Mosaic GPU dumped during one compile, per kernel."""

    ptx: dict[str, str] = field(default_factory=dict)
    ptxas: dict[str, str] = field(default_factory=dict)
    passes: dict[str, list[PassStep]] = field(default_factory=dict)
    child: ChildCompile | None = None


def mosaic_gpu_dump(exported: bytes, place: Placement, passes: bool) -> MosaicGpuDump:
    """Mosaic GPU's dumps of one compile of `exported` for `place`, in a child process."""
    with tempfile.TemporaryDirectory(prefix="boundary-mgpu-dump-") as name:
        folder = Path(name)
        out = folder / "dump"
        out.mkdir()
        env = dict(DUMP_ENV, MOSAIC_GPU_DUMP_TO=str(out))
        if not passes:
            env.pop("MOSAIC_GPU_DUMP_MLIR_PASSES")
        root = nvidia_cuda_root()
        if root is not None:
            env["BOUNDARY_MOSAIC_GPU_CUDA_ROOT"] = root
        dump = MosaicGpuDump(child=compile_in_child(exported, place, folder, env))
        for path in sorted(out.iterdir()):
            kernel, _, kind = path.name.partition(".")
            text = path.read_text(errors="replace")
            if kind == "ptx":
                dump.ptx[f"mosaic_gpu.{kernel}.ptx"] = text
            elif kind == "ptxas":
                dump.ptxas[kernel] = text
            elif kind == "mlir-passes.log":
                dump.passes[kernel] = split_ir_dump(text)
    return dump
