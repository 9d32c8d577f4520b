"""Each Pallas kernel's own IR, decoded from its custom call in the lowered module.

A Pallas kernel reaches XLA as a custom call whose payload is the kernel, already lowered
by Pallas into its compiler's dialect (MLIR bytecode). No compile is needed to read it:

- `tpu_custom_call` (Mosaic TPU): backend_config JSON → `custom_call_config.body`, base64
  bytecode, read with Mosaic's dialect and its `mosaic-serde` pass → `mosaic`.
- `__gpu$xla.gpu.triton`: `mhlo.backend_config` → `ir`, the `tt` module → `triton`.
- `mosaic_gpu_v2`: `mhlo.backend_config` → `module`, read with Mosaic GPU's dialect and
  `mosaic_gpu-serde` → `mosaic_gpu`.

Each artifact has one section per kernel, headed `// ===== kernel NAME =====`; every
op keeps its `loc(...)`, so the page links its lines to the kernel body's source lines.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

SECTION = "// ===== kernel {name} ====="
TPU_TARGET = "tpu_custom_call"
TRITON_TARGET = "__gpu$xla.gpu.triton"
MOSAIC_GPU_TARGETS = ("mosaic_gpu_v2", "mosaic_gpu")


@dataclass(frozen=True)
class KernelCall:
    """One Pallas custom call of a lowered module: its target, a name and its payload."""

    target: str
    name: str
    payload: bytes
    extra: dict[str, Any] = field(default_factory=dict)


def _walk(op: Any) -> Iterator[Any]:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner
                yield from _walk(inner.operation)


def _op_name(op: Any) -> str | None:
    """The kernel's name from the call's location ("jit(f)/boundary_matmul/pallas_call")."""
    found = re.search(r'"(?:[^"/]*/)*([^"/]+)/pallas_call"', str(op.operation.location))
    return found.group(1) if found else None


def kernel_calls(lowered: Any) -> list[KernelCall]:
    """Every Pallas custom call of `lowered` (a jax.stages.Lowered), in program order."""
    from jaxlib.mlir import ir

    module = lowered.compiler_ir("stablehlo")
    found: list[KernelCall] = []
    with module.context:
        for op in _walk(module.operation):
            if op.operation.name != "stablehlo.custom_call":
                continue
            attrs = op.operation.attributes
            target = ir.StringAttr(attrs["call_target_name"]).value
            if target == TPU_TARGET:
                config = json.loads(ir.StringAttr(attrs["backend_config"]).value)
                body = base64.b64decode(config["custom_call_config"]["body"])
                found.append(KernelCall(target, _op_name(op) or "tpu_kernel", body))
            elif target == TRITON_TARGET or target in MOSAIC_GPU_TARGETS:
                config = ir.DictAttr(attrs["mhlo.backend_config"])
                key = "ir" if target == TRITON_TARGET else "module"
                payload = ir.StringAttr(config[key]).value_bytes
                named = ir.StringAttr(config["name"]).value if "name" in config else None
                extra = {
                    k: _attr_value(config[k])
                    for k in ("num_warps", "num_stages", "grid_x", "grid_y", "grid_z")
                    if k in config
                }
                name = named or _op_name(op) or target
                found.append(KernelCall(target, name, payload, extra))
    return found


def _attr_value(attr: Any) -> Any:
    from jaxlib.mlir import ir

    try:
        return ir.IntegerAttr(attr).value
    except (ValueError, TypeError):
        return str(attr)


def sections(parts: list[tuple[str, str]]) -> str | None:
    """One artifact from (kernel name, text) parts; None when there are none."""
    if not parts:
        return None
    return "\n".join(f"{SECTION.format(name=name)}\n{text.rstrip()}\n" for name, text in parts)


def _decode(payload: bytes, serde: str, register: Callable[[Any], None]) -> str:
    """MLIR bytecode → text with locations, after the dialect's own deserialization."""
    from jax._src.interpreters import mlir
    from jaxlib.mlir import ir, passmanager

    context = mlir.make_ir_context()
    register(context)
    with context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(payload)
        if serde:
            passmanager.PassManager.parse(f"builtin.module({serde}{{serialize=false}})").run(
                module.operation
            )
        return str(module.operation.get_asm(enable_debug_info=True))


@dataclass
class KernelIr:
    """The kernels' own IR of one lowered program (None where it has no such kernel)."""

    mosaic: str | None = None
    triton: str | None = None
    mosaic_gpu: str | None = None
    calls: list[KernelCall] = field(default_factory=list)

    @property
    def tpu_kernels(self) -> bool:
        return any(c.target == TPU_TARGET for c in self.calls)

    @property
    def mosaic_gpu_kernels(self) -> bool:
        return any(c.target in MOSAIC_GPU_TARGETS for c in self.calls)


def kernel_ir(lowered: Any) -> KernelIr:
    """Decode every Pallas kernel of `lowered` into its artifact."""
    calls = kernel_calls(lowered)
    out = KernelIr(calls=calls)
    if not calls:
        return out
    mosaic, triton, mgpu = [], [], []
    for call in calls:
        if call.target == TPU_TARGET:
            from jaxlib.mosaic.python import tpu

            mosaic.append((call.name, _decode(call.payload, "mosaic-serde", tpu.register_dialect)))
        elif call.target == TRITON_TARGET:
            from jaxlib.triton import dialect as tt

            head = ", ".join(f"{k}={v}" for k, v in call.extra.items())
            text = _decode(call.payload, "", tt.register_dialect)
            triton.append((call.name, f"// {head}\n{text}" if head else text))
        else:
            from jaxlib.mosaic.python import mosaic_gpu as mgpu_dialect

            text = _decode(call.payload, "mosaic_gpu-serde", mgpu_dialect.register_dialect)
            mgpu.append((_mlir_name(text) or call.name, text))
    out.mosaic, out.triton, out.mosaic_gpu = sections(mosaic), sections(triton), sections(mgpu)
    return out


def _mlir_name(text: str) -> str | None:
    """A Mosaic GPU module's kernel function (its custom call carries no name)."""
    found = re.search(r"func\.func (?:private |public )?@([\w$.]+)", text)
    return found.group(1) if found else None
