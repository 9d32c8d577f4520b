"""The memory report's cost: what it adds to a compile, and how fast its page renders.

1. Overhead (default). A GPT-2-sized forward (the tests' own transformer,
   tests/workers/own_model.py, scaled to 12 layers of width 768, 12 heads, a 50,257-token
   vocabulary, batch 8 × 512 tokens, float32), compiled without the hardware for each
   target, in one process: the plain compile against the compile with `xla_dump_to`
   plus reading the dump and building the report (`workers.compiler.memory_dump`), each
   from cleared caches and a fresh lowering, alternating which goes first, after one
   untimed pass of each that absorbs the compiler's start-up. This machine is shared, so
   the medians are in CPU seconds of this process (every compiler thread), wall seconds
   beside them. Prints the ratio (with ÷ without) and the report's peak beside
   memory_analysis(). Goal: ≤ 1.15×.

       .venv/bin/python bench/memory_report.py [--rounds 3] [--targets v6e:1x1,h100:1]

2. Render (`--render`). A program of about 10,000 HLO instructions (a chain of small
   matrix products, compiled for the CPU), its run posted through a fake worker into an
   in-process app, then `/runs/{id}/memory` fetched `--rounds` times through ASGI:
   prints the median server-side time. Goal: < 300 ms.

       .venv/bin/python bench/memory_report.py --render [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_LOG_DIR", "disabled")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

WIDTH, VOCAB, LAYERS, HEADS, BATCH, SEQ = 768, 50_257, 12, 12, 8, 512


def gpt2_program(device: Any) -> tuple[Callable[..., Any], list[Any]]:
    """own_model's forward at GPT-2 small's sizes, and abstract arguments on `device`."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    from tests.workers import own_model

    own_model.HEADS = HEADS  # the attention splits by this module-level count
    sharding = SingleDeviceSharding(device)

    def f32(*shape: int) -> Any:
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=sharding)

    def block() -> dict[str, Any]:
        attn = {n: {"kernel": f32(WIDTH, WIDTH)} for n in ("query", "key", "value", "out")}
        mlp = {
            "fc": {"kernel": f32(WIDTH, 4 * WIDTH), "bias": f32(4 * WIDTH)},
            "proj": {"kernel": f32(4 * WIDTH, WIDTH), "bias": f32(WIDTH)},
        }
        norms = {"ln1": {"scale": f32(WIDTH)}, "ln2": {"scale": f32(WIDTH)}}
        return {**norms, "attn": attn, "mlp": mlp}

    params = {
        "embed": {"embedding": f32(VOCAB, WIDTH)},
        "blocks": [block() for _ in range(LAYERS)],
        "ln_f": {"scale": f32(WIDTH)},
    }
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32, sharding=sharding)
    return own_model.forward, [params, tokens]


def timed(step: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds, wall seconds, result) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = step()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def overhead(target_id: str, rounds: int) -> None:
    """Part 1 for one target (module docstring)."""
    import jax

    from workers.compiler.memory_dump import dump_folder, dump_options, read_plan, report_of
    from workers.protocol import Platform, parse_target
    from workers.xla_targets.topology import target_devices

    target = parse_target(target_id)
    function, args = gpt2_program(target_devices(target)[0])

    def plain() -> Any:
        jax.clear_caches()
        lowered = jax.jit(function).lower(*args)
        return timed(lambda: lowered.compile(compiler_options={}))

    def with_report() -> Any:
        jax.clear_caches()
        lowered = jax.jit(function).lower(*args)

        def step() -> Any:
            with dump_folder() as folder:
                compiled = lowered.compile(compiler_options=dump_options(folder))
                plan = read_plan(folder)
            vmem = target.platform is Platform.TPU
            return compiled, report_of(plan, compiled.as_text(), vmem=vmem)

        return timed(step)

    plain(), with_report()  # the compiler's start-up, untimed
    samples: dict[str, list[tuple[float, float]]] = {"plain": [], "report": []}
    last: Any = None
    for r in range(rounds):
        order = [("plain", plain), ("report", with_report)]
        for name, step in order if r % 2 == 0 else order[::-1]:
            cpu, wall, out = step()
            samples[name].append((cpu, wall))
            if name == "report":
                last = out
    cpu = {k: statistics.median(c for c, _ in v) for k, v in samples.items()}
    wall = {k: statistics.median(w for _, w in v) for k, v in samples.items()}
    compiled, report = last
    stats = compiled.memory_analysis()
    print(
        f"{target_id}: compile {cpu['plain']:.2f} CPU s ({wall['plain']:.2f} wall), with the "
        f"report {cpu['report']:.2f} CPU s ({wall['report']:.2f} wall): "
        f"{cpu['report'] / cpu['plain']:.3f}× CPU, {wall['report'] / wall['plain']:.3f}× wall "
        f"(goal ≤ 1.15×), {rounds} rounds"
    )
    if report is not None:
        print(
            f"  peak {report.peak_bytes:,} B at step {report.peak_step} of {report.steps}; "
            f"memory_analysis() peak {stats.peak_memory_in_bytes:,} B; unattributed "
            f"{report.unattributed_bytes / report.peak_bytes:.1%}; {len(report.buffers)} "
            f"buffers + {report.other.count} others"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--targets", default="v6e:1x1,h100:1")
    parser.add_argument("--render", action="store_true")
    options = parser.parse_args()
    if options.render:
        from bench.memory_page import render

        render(options.rounds)
        return
    for target in options.targets.split(","):
        overhead(target.strip(), options.rounds)


if __name__ == "__main__":
    main()
