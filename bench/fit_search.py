"""Fit search: compiles per target of the planner against plain bisection, on transformer
train steps that this script builds and exports itself with a symbolic batch.

For each program and target, the planner (app.queue.fit_plan, judged by the criterion of
app.queue.fit_criteria, as the server judges a probe) and plain bisection each find the
largest batch in [1, 65536] whose compile fits; they must agree, and the answer's proof
(it fits, the next batch does not) is printed with its figures. Every compile is real:
the program is exported with `jax.export.symbolic_shape("b")` for cpu, cuda and tpu,
serialized and read back (as an upload is), then compiled for the target without the
hardware at a concrete batch, in this process. Each (program, target, batch) is compiled
once and kept in --cache, so the two searches share compiles and a second run is free.

Goal: the median of the planner's compiles per target ≤ 5 (plain bisection takes 16 or
17 for 65,536 values), counting apart the compiles that checked an answer (the round
check; once the peak shows not monotone, the check of the rest of the range: marked *).
Where a program's peak is not monotone in the batch, the two searches may prove
different boundaries (each fits, and the batch after it does not): the report shows
bisection's in brackets.

    .venv/bin/python bench/fit_search.py [--targets h100:1,b200:1,v6e:1x1] [--programs tx-small]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workers.compiler.jaxenv import apply_jax_environment  # noqa: E402

apply_jax_environment()  # before jax: JAX_PLATFORMS=cpu, libtpu quiet and shareable

from app.queue.fit_criteria import Criterion, criterion_of  # noqa: E402
from app.queue.fit_plan import Grid, Probe, next_step  # noqa: E402
from workers.protocol import parse_target  # noqa: E402

LO, HI = 1, 65_536
TARGETS = ("h100:1", "b200:1", "v6e:1x1")


@dataclass(frozen=True)
class Config:
    """A decoder-only transformer's train step: sizes, and the sequence length."""

    layers: int
    d_model: int
    heads: int
    seq: int
    vocab: int


PROGRAMS: dict[str, Config] = {
    "tx-small": Config(layers=4, d_model=512, heads=8, seq=512, vocab=32_000),
    "tx-wide": Config(layers=2, d_model=1024, heads=16, seq=1024, vocab=8_192),
    "tx-deep": Config(layers=8, d_model=768, heads=12, seq=256, vocab=16_384),
}


def _shapes(c: Config) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {
        "embed": (c.vocab, c.d_model),
        "unembed": (c.d_model, c.vocab),
    }
    for i in range(c.layers):
        shapes[f"{i}.qkv"] = (c.d_model, 3 * c.d_model)
        shapes[f"{i}.out"] = (c.d_model, c.d_model)
        shapes[f"{i}.up"] = (c.d_model, 4 * c.d_model)
        shapes[f"{i}.down"] = (4 * c.d_model, c.d_model)
    return shapes


def train_step(c: Config) -> Callable[..., Any]:
    """One SGD step of next-token cross-entropy: (params, tokens, targets) → (loss, params)."""
    import jax
    import jax.numpy as jnp

    def norm(x: Any) -> Any:
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)

    def forward(params: dict[str, Any], tokens: Any) -> Any:
        x = params["embed"][tokens]
        b, s, d = x.shape
        for i in range(c.layers):
            q, k, v = jnp.split(norm(x) @ params[f"{i}.qkv"], 3, axis=-1)
            heads = (b, s, c.heads, d // c.heads)
            q, k, v = q.reshape(heads), k.reshape(heads), v.reshape(heads)
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // c.heads) ** 0.5
            mixed = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
            x = x + mixed.reshape(b, s, d) @ params[f"{i}.out"]
            x = x + jax.nn.gelu(norm(x) @ params[f"{i}.up"]) @ params[f"{i}.down"]
        return norm(x) @ params["unembed"]

    def step(params: dict[str, Any], tokens: Any, targets: Any) -> Any:
        def loss(p: dict[str, Any]) -> Any:
            logits = forward(p, tokens).astype(jnp.float32)
            picked = jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)
            return -jnp.mean(picked)

        value, grads = jax.value_and_grad(loss)(params)
        return value, jax.tree.map(lambda w, g: w - 1e-3 * g, params, grads)

    return step


@cache
def exported(name: str) -> Any:
    """The program exported with a symbolic batch `b`, serialized and read back."""
    import jax
    import jax.numpy as jnp

    c = PROGRAMS[name]
    (b,) = jax.export.symbolic_shape("b")
    params = {k: jax.ShapeDtypeStruct(s, jnp.bfloat16) for k, s in _shapes(c).items()}
    tokens = jax.ShapeDtypeStruct((b, c.seq), jnp.int32)
    exp = jax.export.export(jax.jit(train_step(c)), platforms=("cpu", "cuda", "tpu"))(
        params, tokens, tokens
    )
    return jax.export.deserialize(exp.serialize())


@dataclass(frozen=True)
class Compile:
    """One compile at one batch: its peak (or the refusal's figure), the refusal, seconds."""

    peak_bytes: int | None
    refused: str | None
    seconds: float


def compile_at(name: str, target_id: str, batch: int) -> Compile:
    """Compile program `name` for `target_id` without the hardware at `batch`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from workers.xla_targets.misfit import hbm_misfit
    from workers.xla_targets.topology import target_devices

    c = PROGRAMS[name]
    devices = target_devices(parse_target(target_id))
    placed = NamedSharding(Mesh(np.array(devices[:1]), ("x",)), PartitionSpec())
    params = {
        k: jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=placed) for k, s in _shapes(c).items()
    }
    tokens = jax.ShapeDtypeStruct((batch, c.seq), jnp.int32, sharding=placed)
    started = time.perf_counter()
    lowered = jax.jit(exported(name).call).lower(params, tokens, tokens)
    try:
        compiled = lowered.compile()
    except Exception as exc:
        misfit = hbm_misfit(exc)
        if misfit is None:
            raise
        return Compile(misfit.temp_bytes, misfit.message, time.perf_counter() - started)
    analysis = compiled.memory_analysis()
    assert analysis is not None, "the compiler gave no memory analysis"
    return Compile(int(analysis.peak_memory_in_bytes), None, time.perf_counter() - started)


class Compiles:
    """Compiles kept in a JSON file, by program, target and batch; counts what is new."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}

    def get(self, name: str, target_id: str, batch: int) -> Compile:
        key = f"{name}|{target_id}|{batch}"
        if key not in self.kept:
            made = compile_at(name, target_id, batch)
            self.kept[key] = asdict(made)
            self.path.write_text(json.dumps(self.kept, indent=0, sort_keys=True))
            what = made.refused[:60] if made.refused else f"peak {made.peak_bytes:,}"
            print(f"  compiled {key}: {what} ({made.seconds:.1f} s)", file=sys.stderr)
        return Compile(**self.kept[key])


@dataclass(frozen=True)
class Found:
    """A search's answer, the values it compiled, in order, and their verdicts; how many
    of them checked an answer, and whether the peak showed not monotone."""

    largest: int | None
    probes: list[Probe]
    checks: int
    non_monotone: bool


def search(criterion: Criterion, at: Callable[[int], Compile], *, predict: bool) -> Found:
    """One target's search, as the server runs it, with compiles from `at`."""
    grid = Grid(LO, HI)
    probes: list[Probe] = []
    refusals: list[str] = []
    while True:
        step = next_step(grid, probes, criterion.aim(refusals), predict=predict)
        if step.done:
            return Found(step.largest, probes, step.checks, step.non_monotone)
        for value in step.values:
            made = at(value)
            fits = criterion.fits(made.peak_bytes, made.refused)
            assert fits is not None, f"no verdict at {value}"
            probes.append(Probe(value, fits, made.peak_bytes, made.refused is not None))
            if made.refused is not None:
                refusals.append(made.refused)


def row(name: str, target_id: str, compiles: Compiles) -> dict[str, Any]:
    """Both searches of one program on one target, and the answer's proof."""
    criterion = criterion_of(parse_target(target_id))

    def at(batch: int) -> Compile:
        return compiles.get(name, target_id, batch)

    planned = search(criterion, at, predict=True)
    bisected = search(criterion, at, predict=False)
    largest = planned.largest
    proof = {"largest": largest, "peak_at": None, "next": None, "peak_next": None}
    if largest is not None:
        proof["peak_at"] = at(largest).peak_bytes
        if largest < HI:
            proof.update({"next": largest + 1, "peak_next": at(largest + 1).peak_bytes})
    return {
        "program": name,
        "target": target_id,
        "criterion": criterion.text(),
        **proof,
        "planner": len(planned.probes) - planned.checks,
        "checks": planned.checks,
        "non_monotone": planned.non_monotone,
        "planner_values": [p.value for p in planned.probes],
        "planner_s": sum(
            at(p.value).seconds for p in planned.probes[: len(planned.probes) - planned.checks]
        ),
        "bisection": len(bisected.probes),
        "bisection_largest": bisected.largest,
        "bisection_s": sum(at(p.value).seconds for p in bisected.probes),
    }


def report(rows: list[dict[str, Any]]) -> None:
    """One line per program and target: each search's answer, compiles and compile
    seconds (this machine's, as kept), and the planner's proof; then the medians."""
    print(
        f"{'program':10} {'target':8} {'largest':>8} {'planner':>12} {'checks':>7} "
        f"{'bisection':>16}  proof"
    )
    for r in rows:
        proof = f"peak {r['peak_at']:,} at {r['largest']}" if r["largest"] else "lo does not fit"
        if r["next"] is not None:
            nxt = r["peak_next"]
            proof += f"; {'refused' if nxt is None else f'{nxt:,}'} at {r['next']}"
        other = "" if r["bisection_largest"] == r["largest"] else f" ({r['bisection_largest']})"
        planner = f"{r['planner']} / {r['planner_s']:.0f} s"
        bisection = f"{r['bisection']} / {r['bisection_s']:.0f} s{other}"
        checks = f"{r['checks']}{'*' if r['non_monotone'] else ''}"
        print(
            f"{r['program']:10} {r['target']:8} {r['largest'] or '-':>8} {planner:>12} "
            f"{checks:>7} {bisection:>16}  {proof}"
        )
    for target in sorted({r["target"] for r in rows}):
        mine = [r for r in rows if r["target"] == target]
        planner = statistics.median(r["planner"] for r in mine)
        bisection = statistics.median(r["bisection"] for r in mine)
        print(f"median compiles on {target}: planner {planner}, bisection {bisection}")
    print(
        f"median compiles per target, all: planner {statistics.median(r['planner'] for r in rows)}"
        f", bisection {statistics.median(r['bisection'] for r in rows)} (goal: planner ≤ 5)"
    )
    monotone = [r["planner"] for r in rows if not r["non_monotone"]]
    if monotone:
        print(f"median on the monotone searches: {statistics.median(monotone)} of {monotone}")
    print("checks: compiles that checked an answer, apart; *: the peak is not monotone")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/boundary-fit-compiles.json"))
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    compiles = Compiles(args.cache)
    rows = [
        row(name, target, compiles)
        for target in args.targets.split(",")
        for name in args.programs.split(",")
    ]
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
