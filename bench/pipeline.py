"""What capturing XLA's pass pipeline costs, as a ratio: (compile + capture) ÷ compile.

For each program it alternates `--rounds` times between a plain `lowered.compile()` and
a plain compile followed by the capture (`workers.compiler.pipeline.capture_pipeline`: a second
compile with the per-pass dump, then reading the dump back), lowering afresh each time.
In-memory caches are cleared before every compile and the persistent cache is off, so
each compile does the full work. It prints the medians, the ratio and the capture's size.

Targets: this process's CPU, then `v6e:2x4` (libtpu) and `b200:1` (JAX's CUDA plugin),
each compiled without its hardware when its compiler is installed (skipped, and said so,
when not).

    JAX_PLATFORMS=cpu TPU_LOG_DIR=disabled .venv/bin/python bench/pipeline.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROGRAMS: dict[str, dict[str, Any]] = {
    "attention": {"batch": 2, "heads": 4, "seq_len": 256, "head_dim": 64},
    "matmul": {"m": 512, "n": 512, "k": 512},
    "elementwise": {"n": 1 << 20},
}


TARGET_PROGRAMS: dict[str, dict[str, dict[str, Any]]] = {
    "v6e:2x4": {"sharded-matmul": {"sharding": "tensor"}},
    "b200:1": {"attention": PROGRAMS["attention"], "matmul": PROGRAMS["matmul"]},
}


def _lowered(workload: str, params: dict[str, Any], target: str | None = None) -> Any:
    """The program lowered for this process's CPU, or for `target`'s devices."""
    import jax
    import jax.numpy as jnp

    from workers.catalog import parse_params
    from workers.scale.prepare import prepare
    from workers.workloads import get_workload

    parsed = parse_params(workload, params, 1 << 30)
    program = get_workload(workload)
    if target is None:
        devices = jax.devices()[:1]
    else:
        from workers.protocol.targets import parse_target
        from workers.xla_targets.topology import target_devices

        devices = list(target_devices(parse_target(target)))
    scaled = prepare(program, parsed, devices)
    if scaled is not None:
        return scaled.jitted.trace(*scaled.abstract).lower()
    sharding = jax.sharding.SingleDeviceSharding(devices[0])
    specs = [
        jax.ShapeDtypeStruct(s.shape, jnp.dtype(s.dtype), sharding=sharding)
        for s in program.input_specs(parsed)
    ]
    return jax.jit(program.function(parsed)).trace(*specs).lower()


def measure(
    workload: str, params: dict[str, Any], rounds: int, target: str | None = None
) -> dict[str, Any]:
    """Median seconds of a plain compile and of compile + capture, alternated."""
    import jax

    from workers.compiler.pipeline import DEFAULT_MAX_BYTES, capture_pipeline

    jax.config.update("jax_enable_compilation_cache", False)
    plain: list[float] = []
    with_capture: list[float] = []
    kept = steps = 0
    for _ in range(rounds):
        # A fresh lowering each time: a Lowered keeps what it compiled.
        jax.clear_caches()
        lowered = _lowered(workload, params, target)
        t0 = time.perf_counter()
        lowered.compile()
        plain.append(time.perf_counter() - t0)
        jax.clear_caches()
        lowered = _lowered(workload, params, target)
        t0 = time.perf_counter()
        lowered.compile()
        capture = capture_pipeline(lowered, DEFAULT_MAX_BYTES)
        with_capture.append(time.perf_counter() - t0)
        kept, steps = capture.bytes, len(capture.steps)
    compile_s, total_s = statistics.median(plain), statistics.median(with_capture)
    return {
        "program": workload,
        "target": target or "cpu",
        "compile_s": compile_s,
        "compile_and_capture_s": total_s,
        "ratio": total_s / compile_s,
        "steps": steps,
        "bytes": kept,
        "rounds": rounds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [measure(name, params, args.rounds) for name, params in PROGRAMS.items()]
    skipped: list[str] = []
    for target, programs in TARGET_PROGRAMS.items():
        try:
            for name, params in programs.items():
                rows.append(measure(name, params, args.rounds, target))
        except Exception as exc:  # noqa: BLE001 - a missing compiler: say so and go on
            skipped.append(f"{target}: {str(exc).splitlines()[0][:160]}")
    if args.json:
        print(json.dumps({"rows": rows, "skipped": skipped}, indent=2))
        return 0
    print(f"{'target':8} {'program':12} {'compile':>10} {'+capture':>10} {'ratio':>7} steps  bytes")
    for r in rows:
        print(
            f"{r['target']:8} {r['program']:12} {r['compile_s'] * 1e3:8.1f}ms "
            f"{r['compile_and_capture_s'] * 1e3:8.1f}ms {r['ratio']:6.2f}x "
            f"{r['steps']:5d}  {r['bytes']:,}"
        )
    print(f"medians of {args.rounds} alternated rounds; in-memory caches cleared before each")
    for line in skipped:
        print(f"skipped {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
