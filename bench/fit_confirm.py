"""Acceptance check of fit searches on exported programs with a symbolic
dimension, yours or its own: the server's answer, confirmed outside Boundary.

    .venv/bin/python bench/fit_confirm.py [FILE.jaxexport ...] [--target v6e:1x1 ...]
        [--dim b] [--range 1:65536] [--step 1] [--fix s=128] [--usable-fraction 0.75]

For each file, a fit search through a real `boundary serve --workers 1` (on a free
127.0.0.1 port, bench/first_answer.py's): `POST /api/v1/fits` for every target, then
`GET /api/v1/fits/{id}` until it ends. Per target its `largest_fitting` L is then
compiled again outside Boundary, by bench/deviceless.py (plain JAX: jax.export.deserialize,
the target's devices from jax.experimental.topologies, jit(exp.call).lower(...).compile(),
memory_analysis()), at L and at the next value of the search's grid, L + step (the grid is
lo, lo + step, …, hi: docs/fit-search.md), and judged by the criterion as
docs/fit-search.md states it, written here again from that text:

- TPU v6e: libtpu's own verdict: a program that compiles fits, one libtpu refuses for its
  HBM does not;
- NVIDIA GPUs: memory_analysis()'s peak_memory_in_bytes, nothing added, at most the usable
  fraction (default 0.75, JAX's default preallocation) of the published HBM: 80 GB for an
  H100, 141 GB for an H200, 180 GB for a B200 (decimal).

PASS when L fits and L + step does not (or L is the range's top and fits; or there is no L
and lo does not fit), and the server's own figures for the criterion are the doc's. With
no file it exports its own program: a decoder-only transformer train step with a symbolic
batch `b` (bench/fit_search.py's builder; --program picks one of its configurations).
Exit status 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.deviceless import Outcome, compile_file, environment  # noqa: E402
from bench.first_answer import serve  # noqa: E402

TARGETS = ("v6e:1x1", "h100:1", "b200:1")
PUBLISHED_HBM = {"h100": 80 * 10**9, "h200": 141 * 10**9, "b200": 180 * 10**9}
"""docs/fit-search.md: "80 GB for an H100, 141 GB for an H200, 180 GB for a B200"."""
DEFAULT_FRACTION = 0.75
SETTINGS = {"BOUNDARY_JOB_TIMEOUT_S": "3600", "BOUNDARY_QUEUE_TIMEOUT_S": "7200"}
"""The server's: a v6e probe near the HBM limit can compile for many minutes on a busy
machine, past the default 300 s a job may run (the target's search then fails)."""


def own_program(folder: Path, name: str) -> Path:
    """bench/fit_search.py's train step `name`, exported with a symbolic batch `b` for
    cpu, cuda and tpu and serialized, as a user's upload is."""
    import jax
    import jax.numpy as jnp

    from bench.fit_search import PROGRAMS, Config, _shapes, train_step

    tiny = Config(layers=1, d_model=256, heads=4, seq=128, vocab=4_096)
    config = {**PROGRAMS, "tx-tiny": tiny}[name]
    (b,) = jax.export.symbolic_shape("b")
    params = {k: jax.ShapeDtypeStruct(s, jnp.bfloat16) for k, s in _shapes(config).items()}
    tokens = jax.ShapeDtypeStruct((b, config.seq), jnp.int32)
    exported = jax.export.export(jax.jit(train_step(config)), platforms=("cpu", "cuda", "tpu"))(
        params, tokens, tokens
    )
    path = folder / f"{name}.jaxexport"
    path.write_bytes(exported.serialize())
    return path


def symbolic_names(data: bytes) -> list[str]:
    """The symbolic dimensions of the file's arguments, by their own names."""
    import jax

    exp = jax.export.deserialize(bytearray(data))
    names: set[str] = set()
    for aval in exp.in_avals:
        for d in aval.shape:
            if not isinstance(d, int):
                names.update(d.get_vars())
    return sorted(names)


def search(url: str, client: httpx.Client, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Upload-less: POST the search, wait for it to end, its JSON."""
    response = client.post(f"{url}/api/v1/fits", json=body)
    if response.status_code != 202:
        raise RuntimeError(f"fit search refused: {response.text[:800]}")
    fit_id = response.json()["id"]
    deadline, said = time.monotonic() + timeout, ""
    while True:
        fit: dict[str, Any] = client.get(f"{url}/api/v1/fits/{fit_id}").json()
        line = " · ".join(
            f"{t['target']} {t['status']} {t['probes_done']} compiles {t['bracket']}"
            for t in fit["targets"]
        )
        if line != said:
            print(f"  [{time.strftime('%H:%M:%S')}] {line}", flush=True)
            said = line
        if fit["status"] in ("done", "failed", "cancelled"):
            return fit
        if time.monotonic() > deadline:
            client.post(f"{url}/api/v1/fits/{fit_id}/cancel")
            raise RuntimeError(f"the fit search ran past {timeout:.0f} s and was cancelled")
        time.sleep(2)


@dataclass(frozen=True)
class Verdict:
    fits: bool | None
    figures: str


def judge(target: str, outcome: Outcome, fraction: float) -> Verdict:
    """The criterion of docs/fit-search.md, applied to one compile made here."""
    model = target.split(":", 1)[0]
    if model == "v6e":
        if outcome.refused is not None:
            return Verdict(False, f"libtpu refused ({_first_line(outcome.refused)})")
        return Verdict(True, f"libtpu compiled it, peak {outcome.peak:,}")
    usable = int(fraction * PUBLISHED_HBM[model])
    if outcome.peak is None:
        return Verdict(None, "no peak")
    sign = "≤" if outcome.peak <= usable else ">"
    return Verdict(outcome.peak <= usable, f"peak {outcome.peak:,} {sign} {usable:,}")


def _first_line(text: str) -> str:
    for mark in ("Ran out of memory", "Used ", "exceeds available HBM"):
        at = text.find(mark)
        if at >= 0:
            return text[at : at + 110].splitlines()[0]
    return text.strip().splitlines()[0][:110]


def confirm(
    data: bytes,
    row: dict[str, Any],
    *,
    grid: tuple[int, int, int],
    fixed: dict[str, int],
    dim: str,
    fraction: float,
) -> tuple[bool, list[str]]:
    """Compile at the answer and at the next grid value outside Boundary and judge them."""
    lo, hi, step = grid
    target, largest = row["target"], row["largest_fitting"]
    notes: list[str] = []
    ok = True
    if row["status"] != "found":
        return False, [f"the search ended {row['status']}: {row.get('failure')}"]
    model = target.split(":", 1)[0]
    if model != "v6e":  # the criterion's figures, as the server states them
        usable = int(fraction * PUBLISHED_HBM[model])
        if row["hbm_bytes"] != PUBLISHED_HBM[model] or row["usable_bytes"] != usable:
            ok = False
            notes.append(f"server's criterion {row['hbm_bytes']:,}/{row['usable_bytes']:,}")
    wanted: list[tuple[int, bool]] = []
    if largest is None:
        wanted.append((lo, False))
    else:
        wanted.append((largest, True))
        if largest + step <= hi:
            wanted.append((largest + step, False))
            if row["value_above"] != largest + step:
                ok = False
                notes.append(f"the server's value above is {row['value_above']}")
        else:
            notes.append("the top of the range fits")
    for value, should in wanted:
        outcome = compile_file(data, target, {**fixed, dim: value})
        verdict = judge(target, outcome, fraction)
        good = verdict.fits is should
        ok &= good
        said = "fits" if verdict.fits else "does not fit"
        notes.append(f"{dim}={value}: {said}: {verdict.figures} ({outcome.seconds:.0f} s)")
    return ok, notes


@dataclass(frozen=True)
class Row:
    """One target's answer on one grid, and what confirming it outside Boundary found."""

    program: str
    grid: tuple[int, int, int]
    target: str
    largest: int | None
    non_monotone: bool
    searched: int
    """The search's own compiles (the goal is about these)."""
    checks: int
    """The compiles that checked its answers (the round check, the rest of the range)."""
    seconds: float
    ok: bool
    notes: list[str]


def grids_of(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    """The grids to search: each --grid LO:HI:STEP, else --range with --step."""
    if args.grid:
        return [tuple(int(n) for n in g.split(":")) for g in args.grid]  # type: ignore[misc]
    lo, hi = (int(n) for n in args.range.split(":"))
    return [(lo, hi, args.step)]


def upload(url: str, client: httpx.Client, data: bytes) -> str:
    response = client.post(
        f"{url}/api/v1/artifacts",
        params={"kind": "exported"},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    response.raise_for_status()
    sha: str = response.json()["sha256"]
    return sha


def searched(
    url: str, client: httpx.Client, path: Path, grid: tuple[int, int, int], args: argparse.Namespace
) -> list[Row]:
    """One file's search on one grid through the server, each target's answer confirmed."""
    data = path.read_bytes()
    fixed = {k: int(v) for k, v in (f.split("=", 1) for f in args.fix)}
    dims = [d for d in symbolic_names(data) if d not in fixed]
    dim = args.dim or (dims[0] if len(dims) == 1 else None)
    if dim is None:
        raise SystemExit(f"{path}: name the dimension to search (--dim): {dims}")
    lo, hi, step = grid
    body = {
        "artifact": upload(url, client, data),
        "dimension": dim,
        "range": [lo, hi],
        "step": step,
        "targets": args.target or list(TARGETS),
        "usable_fraction": args.usable_fraction,
        **({"params": {"dims": fixed}} if fixed else {}),
    }
    started = time.perf_counter()
    fit = search(url, client, body, args.timeout)
    took = time.perf_counter() - started
    name = f"{path.stem}.{lo}-{hi}-{step}.fit.json"
    (args.keep or Path(tempfile.gettempdir())).joinpath(name).write_text(json.dumps(fit, indent=1))
    print(f"{path.name}, {dim} in {lo:,} … {hi:,} step {step:,}: {took:.0f} s", flush=True)
    rows = []
    for t in fit["targets"]:
        ok, notes = confirm(data, t, grid=grid, fixed=fixed, dim=dim, fraction=args.usable_fraction)
        checks = t.get("checks_done") or 0
        row = Row(
            path.stem, grid, t["target"], t["largest_fitting"], bool(t.get("non_monotone")),
            t["probes_done"] - checks, checks, took, ok, notes,
        )  # fmt: skip
        rows.append(row)
        print(f"  {t['target']}: {'PASS' if ok else 'FAIL'}: {'; '.join(notes)}", flush=True)
    return rows


def agreement(rows: list[Row]) -> list[tuple[str, str, bool, str]]:
    """Per program and target, the finest grid's answer A against each coarser grid's C
    (step s): C ≤ A < C + s, or both flag the peak not monotone."""
    found = []
    for name, target in dict.fromkeys((r.program, r.target) for r in rows):
        mine = sorted((r for r in rows if (r.program, r.target) == (name, target)),
                      key=lambda r: r.grid[2])  # fmt: skip
        fine = mine[0]
        for coarse in mine[1:]:
            step = coarse.grid[2]
            a, c = fine.largest, coarse.largest
            within = a is not None and c is not None and c <= a < c + step
            both = fine.non_monotone and coarse.non_monotone
            said = f"step {fine.grid[2]}: {a}, step {step}: {c}"
            why = "within a step" if within else "both not monotone" if both else "DISAGREE"
            found.append((name, target, within or both, f"{said}: {why}"))
    return found


def report(rows: list[Row]) -> int:
    """The table, the agreement of the grids and the median compiles; 1 when anything
    failed."""
    print(
        "\n| program | grid | target | largest_fitting | not monotone | compiles: search + checks "
        "| search time | result | confirmed outside Boundary |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi, step = r.grid
        print(
            f"| {r.program} | {lo:,} … {hi:,} step {step:,} | {r.target} | {r.largest} | "
            f"{'yes' if r.non_monotone else 'no'} | {r.searched} + {r.checks} | {r.seconds:.0f} s "
            f"| {'PASS' if r.ok else '**FAIL**'} | {'; '.join(r.notes)} |"
        )
    agreed = agreement(rows)
    for name, target, _ok, said in agreed:
        print(f"{name} {target}: {said}")
    monotone = [r.searched for r in rows if not r.non_monotone]
    if monotone:
        print(
            f"median compiles per target on the monotone searches: "
            f"{statistics.median(monotone)} of {monotone} (goal ≤ 5)"
        )
    failed = sum(not r.ok for r in rows) + sum(not ok for *_, ok, _ in agreed)
    print(f"\n{len(rows)} answers, {len(agreed)} agreements, {failed} failed")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE.jaxexport")
    parser.add_argument(
        "--target", action="append", default=[], help="default: " + ", ".join(TARGETS)
    )
    parser.add_argument("--dim", help="the dimension searched (default: the file's only one)")
    parser.add_argument("--range", default="1:65536", help="LO:HI (default 1:65536)")
    parser.add_argument("--step", type=int, default=1)
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="LO:HI:STEP",
        help="search on this grid (repeat: the answers must agree, see above)",
    )
    parser.add_argument("--fix", action="append", default=[], metavar="NAME=N")
    parser.add_argument("--usable-fraction", type=float, default=DEFAULT_FRACTION)
    parser.add_argument(
        "--program",
        default="tx-deep",
        help="own program: bench/fit_search.py's tx-small, tx-wide, tx-deep, or tx-tiny "
        "(1 layer × 256 wide, sequence 128, vocabulary 4,096)",
    )
    parser.add_argument("--keep", type=Path, help="keep the exports and the searches here")
    parser.add_argument("--timeout", type=float, default=3600, help="per search, seconds")
    args = parser.parse_args()
    environment()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="boundary-fit-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        args.keep = folder
        files = args.files or [own_program(folder, args.program)]
        (folder / "server").mkdir(exist_ok=True)
        with serve(folder / "server", SETTINGS) as url, httpx.Client(timeout=120) as client:
            for path in files:
                for grid in grids_of(args):
                    rows += searched(url, client, path, grid, args)
    return report(rows)


if __name__ == "__main__":
    sys.exit(main())
