"""Small optimized-HLO modules written by hand, one per kind of change the HLO diff tells
apart: a renaming, a fusion split in two (and, read the other way, two merged), a layout
change, an added collective; and a generator of large modules for the timing checks."""

from __future__ import annotations

import re


def meta(op: str, line: int) -> str:
    """Metadata as jax writes it: the JAX operation and the user's source line."""
    return f'metadata={{op_name="jit(f)/{op}" source_file="/src/model.py" source_line={line}}}'


BASE = f"""HloModule jit_f, is_scheduled=true

%fused_add_mul (p0: f32[8,128], p1: f32[8,128]) -> f32[8,128] {{
  %p0 = f32[8,128]{{1,0}} parameter(0)
  %p1 = f32[8,128]{{1,0}} parameter(1)
  %add.1 = f32[8,128]{{1,0}} add(%p0, %p1), {meta("add", 10)}
  ROOT %mul.1 = f32[8,128]{{1,0}} multiply(%add.1, %p1), {meta("mul", 11)}
}}

ENTRY %main (x: f32[8,128], y: f32[8,128]) -> f32[8,128] {{
  %x = f32[8,128]{{1,0}} parameter(0), {meta("x", 1)}
  %y = f32[8,128]{{1,0}} parameter(1), {meta("y", 1)}
  %fusion.3 = f32[8,128]{{1,0}} fusion(%x, %y), kind=kLoop, calls=%fused_add_mul, {meta("mul", 11)}
  ROOT %neg.1 = f32[8,128]{{1,0}} negate(%fusion.3), {meta("neg", 12)}
}}
"""
"""x + y, times y, negated: one loop fusion and a negate."""

RENAMED = (
    BASE.replace("fusion.3", "fusion.9")
    .replace("neg.1", "negate.7")
    .replace("%add.1", "%add.4")
    .replace("fused_add_mul", "fused_computation.2")
    .replace("%p1", "%param_1.5")
)
"""BASE with every instruction and computation renamed."""

MUL = meta("mul", 11)
SPLIT = f"""HloModule jit_f, is_scheduled=true

%fused_add (p0: f32[8,128], p1: f32[8,128]) -> f32[8,128] {{
  %p0 = f32[8,128]{{1,0}} parameter(0)
  %p1 = f32[8,128]{{1,0}} parameter(1)
  ROOT %add.1 = f32[8,128]{{1,0}} add(%p0, %p1), {meta("add", 10)}
}}

%fused_mul (q0: f32[8,128], q1: f32[8,128]) -> f32[8,128] {{
  %q0 = f32[8,128]{{1,0}} parameter(0)
  %q1 = f32[8,128]{{1,0}} parameter(1)
  ROOT %mul.1 = f32[8,128]{{1,0}} multiply(%q0, %q1), {meta("mul", 11)}
}}

ENTRY %main (x: f32[8,128], y: f32[8,128]) -> f32[8,128] {{
  %x = f32[8,128]{{1,0}} parameter(0), {meta("x", 1)}
  %y = f32[8,128]{{1,0}} parameter(1), {meta("y", 1)}
  %fusion.3 = f32[8,128]{{1,0}} fusion(%x, %y), kind=kLoop, calls=%fused_add, {meta("add", 10)}
  %fusion.4 = f32[8,128]{{1,0}} fusion(%fusion.3, %y), kind=kLoop, calls=%fused_mul, {MUL}
  ROOT %neg.1 = f32[8,128]{{1,0}} negate(%fusion.4), {meta("neg", 12)}
}}
"""
"""BASE with its fusion split in two: the add in one kernel, the multiply in the next."""

RELAID = BASE.replace(
    "ROOT %neg.1 = f32[8,128]{1,0}", "ROOT %neg.1 = f32[8,128]{0,1}"
)  # fmt: skip
"""BASE whose result is laid out column-major."""


def gathered(base: str, source: str) -> str:
    """`base` with an all-gather of `source` over four devices (32 × 128 f32: 16,384 bytes a
    device) before its root negate, which reads a slice of the gathered value."""
    return re.sub(
        r"  ROOT %neg.1 = f32\[8,128\]\{1,0\} negate\(%[\w.]+\)",
        "  %all-gather-start = (f32[8,128]{1,0}, f32[32,128]{1,0}) "
        f"all-gather-start(%{source}), channel_id=1, replica_groups={{{{0,1,2,3}}}}, "
        f"dimensions={{0}}, use_global_device_ids=true, {meta('all_gather', 12)}\n"
        "  %all-gather-done = f32[32,128]{1,0} all-gather-done(%all-gather-start)\n"
        "  %slice.1 = f32[8,128]{1,0} slice(%all-gather-done), slice={[0:8], [0:128]}\n"
        "  ROOT %neg.1 = f32[8,128]{1,0} negate(%slice.1)",
        base,
    )


GATHERED = gathered(BASE, "fusion.3")
"""BASE with an all-gather of its fusion's result."""


def wide(base: str, extra: int) -> str:
    """`base` with `extra` more negates of its parameter x, unused (rows for a long list)."""
    added = "".join(
        f"  %spare.{k} = f32[8,128]{{1,0}} negate(%x), {meta('neg', 100 + k)}\n"
        for k in range(extra)
    )
    return base.replace("  ROOT %neg.1", added + "  ROOT %neg.1")


def large(layers: int, *, variant: bool = False) -> str:
    """A module of `layers` fused layers (an exponential of a product, plus a residual
    add, each in a loop fusion) followed by a bias add and a copy per layer: 5 × `layers`
    top-level instructions and 3 more per fusion body. The `variant` renames every
    instruction and computation, lays every tenth copy out column-major, splits every
    hundredth fusion in two and adds an all-reduce every five hundred layers."""
    tag = "v" if variant else "o"
    bodies: list[str] = []
    entry = [
        "ENTRY %main (x: f32[64,128], w: f32[64,128]) -> f32[64,128] {",
        f"  %x.{tag} = f32[64,128]{{1,0}} parameter(0), {meta('x', 1)}",
        f"  %w.{tag} = f32[64,128]{{1,0}} parameter(1), {meta('w', 1)}",
    ]
    previous = f"%x.{tag}"
    for k in range(layers):
        line = 10 + k
        split = variant and k % 100 == 7
        name = f"%{tag}_fusion.{k}"
        if split:
            bodies.append(_body(f"{tag}_mul.{k}", ["multiply"], line))
            bodies.append(_body(f"{tag}_exp.{k}", ["exponential", "add"], line, param=True))
            entry.append(f"  {name}.a = f32[64,128]{{1,0}} fusion({previous}, %w.{tag}), "
                         f"kind=kLoop, calls=%{tag}_mul.{k}, {meta('mul', line)}")  # fmt: skip
            entry.append(f"  {name} = f32[64,128]{{1,0}} fusion({name}.a, {previous}), "
                         f"kind=kLoop, calls=%{tag}_exp.{k}, {meta('add', line)}")  # fmt: skip
        else:
            bodies.append(_body(f"{tag}_body.{k}", ["multiply", "exponential", "add"], line))
            entry.append(f"  {name} = f32[64,128]{{1,0}} fusion({previous}, %w.{tag}), "
                         f"kind=kLoop, calls=%{tag}_body.{k}, {meta('add', line)}")  # fmt: skip
        layout = "{0,1}" if variant and k % 10 == 3 else "{1,0}"
        entry += [
            f"  %{tag}_bias.{k} = f32[64,128]{{1,0}} add({name}, %w.{tag}), {meta('bias', line)}",
            f"  %{tag}_scale.{k} = f32[64,128]{{1,0}} multiply(%{tag}_bias.{k}, %x.{tag}), "
            f"{meta('scale', line)}",
            f"  %{tag}_neg.{k} = f32[64,128]{{1,0}} negate(%{tag}_scale.{k}), {meta('neg', line)}",
            f"  %{tag}_copy.{k} = f32[64,128]{layout} copy(%{tag}_neg.{k}), {meta('copy', line)}",
        ]
        previous = f"%{tag}_copy.{k}"
        if variant and k % 500 == 250:
            entry.append(
                f"  %{tag}_all-reduce.{k} = f32[64,128]{{1,0}} all-reduce({previous}), "
                f"channel_id={k}, replica_groups={{{{0,1,2,3}}}}, to_apply=%{tag}_sum, "
                f"{meta('psum', line)}"
            )
            previous = f"%{tag}_all-reduce.{k}"
    entry += [f"  ROOT %out.{tag} = f32[64,128]{{1,0}} copy({previous})", "}"]
    reducer = (
        f"%{tag}_sum (a: f32[], b: f32[]) -> f32[] {{\n  %a.{tag} = f32[] parameter(0)\n"
        f"  %b.{tag} = f32[] parameter(1)\n  ROOT %s.{tag} = f32[] add(%a.{tag}, %b.{tag})\n}}\n"
    )
    head = "HloModule jit_large, is_scheduled=true\n\n" + (reducer if variant else "")
    return head + "\n" + "\n".join(bodies) + "\n" + "\n".join(entry) + "\n"


def _body(name: str, ops: list[str], line: int, *, param: bool = False) -> str:
    """A fused computation of two parameters that applies `ops` in turn: a multiply by
    the second parameter, an exponential, an add of the first (of the second, `param`)."""
    text = [
        f"%{name} (p0.{name}: f32[64,128], p1.{name}: f32[64,128]) -> f32[64,128] {{",
        f"  %p0.{name} = f32[64,128]{{1,0}} parameter(0)",
        f"  %p1.{name} = f32[64,128]{{1,0}} parameter(1)",
    ]
    value = f"%p0.{name}"
    other = {"multiply": f", %p1.{name}", "exponential": "", "add": f", %p{int(param)}.{name}"}
    for n, op in enumerate(ops):
        root = "ROOT " if n == len(ops) - 1 else ""
        text.append(
            f"  {root}%{op}.{name} = f32[64,128]{{1,0}} {op}({value}{other[op]}), "
            f"{meta(op[:3], line)}"
        )
        value = f"%{op}.{name}"
    return "\n".join(text) + "\n}\n"
