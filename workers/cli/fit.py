"""`boundary fit`: the largest value of one integer whose compile fits each target, found
by a server's fit search (POST /api/v1/fits), followed until every target has its
answer, then printed as a table with the search's page.

    boundary fit WORKLOAD|FILE.jaxexport|SHA256 --dim NAME --range LO:HI [--step N]
                 --target T [--target T …] --server URL [--token T] [key=value …]

A file is uploaded first; a SHA-256 names a function uploaded already. `--dim NAME` is
the integer searched (a workload's parameter, or the function's symbolic dimension);
`--dim NAME=N` fixes another symbolic dimension. Progress (compiles done, the bracket)
goes to stderr while it runs, and a server that restarts on the way is waited for (the
search survives it); Ctrl-C cancels the search. Exit status: 0 when every
target has its answer, 1 when the search failed or was cancelled, 2 when the server
refused it (the field at fault named).

Light: the standard library and httpx.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio

from workers.cli.export_upload import post_file
from workers.cli.run import UsageError, parse_assignments
from workers.export.api_client import Refused, ServerLost, refusal_text, wait_ended
from workers.export.server_address import EXAMPLES, ServerAddress, server_option

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_INTERRUPTED = 0, 1, 2, 130
SUBMIT_TOKEN_ENV = "BOUNDARY_SUBMIT_TOKEN"
_SHA = re.compile(r"^[0-9a-f]{64}$")
_RANGE = re.compile(r"^([0-9]+):([0-9]+)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boundary fit",
        description="The largest value of one integer whose compile fits each target.",
    )
    parser.add_argument("program", help="a workload, an exported function's file, or its SHA-256")
    parser.add_argument("params", nargs="*", help="other parameters, key=value")
    parser.add_argument(
        "--dim", action="append", default=[], help="the integer searched (NAME), or NAME=N"
    )
    parser.add_argument("--range", required=True, help="LO:HI, both included")
    parser.add_argument("--step", type=int, default=1, help="values are LO + k × STEP")
    parser.add_argument("--target", action="append", required=True, help="e.g. v6e:1x1, h100:1")
    parser.add_argument("--path", help="one path for every target (default: each its own)")
    parser.add_argument("--usable-fraction", type=float, help="GPU: share of HBM (0.75)")
    parser.add_argument(
        "--server", required=True, type=server_option, help=f"the Boundary server, e.g. {EXAMPLES}"
    )
    parser.add_argument("--token", help=f"submission token (default ${SUBMIT_TOKEN_ENV})")
    parser.add_argument("--json", action="store_true", help="print the search's JSON instead")
    return parser


def search_body(args: argparse.Namespace, artifact: str | None) -> dict[str, Any]:
    """The POST /api/v1/fits body the command line describes (UsageError naming a word)."""
    searched = [d for d in args.dim if "=" not in d]
    if len(searched) != 1 or not _NAME.match(searched[0]):
        raise UsageError("--dim: name the one integer searched, e.g. --dim batch")
    found = _RANGE.match(args.range)
    if found is None:
        raise UsageError(f"--range {args.range!r}: expected LO:HI, e.g. 1:65536")
    params = parse_assignments(args.params)
    fixed = [d for d in args.dim if "=" in d]
    if fixed:
        dims = parse_assignments(fixed)
        params["dims"] = {**(params.get("dims") or {}), **dims}
    body: dict[str, Any] = {
        "params": params,
        "dimension": searched[0],
        "range": [int(found[1]), int(found[2])],
        "step": args.step,
        "targets": args.target,
    }
    body.update({"artifact": artifact} if artifact else {"workload": args.program})
    if args.path:
        body["path"] = args.path
    if args.usable_fraction is not None:
        body["usable_fraction"] = args.usable_fraction
    return body


def _artifact(program: str, client: Any, server: ServerAddress) -> str | None:
    """The SHA-256 of the function `program` names (a file is uploaded first); None when
    `program` is a workload's name."""
    if _SHA.match(program):
        return program
    path = Path(program)
    if not path.is_file():
        return None
    sha = post_file(client, path.read_bytes(), "exported")
    print(f"uploaded {path.name}: {server.link(f'/artifacts/{sha}')}", file=sys.stderr)
    return sha


def progress_line(target: dict[str, Any]) -> str:
    """One target's progress: compiles done, the bracket, what compiles now."""
    bracket = target["bracket"]
    known = [
        f"{bracket['fits']:,} fits" if bracket["fits"] is not None else "",
        f"{bracket['over']:,} does not" if bracket["over"] is not None else "",
    ]
    pending = [f"{p['value']:,}" for p in target["probes"] if p["status"] in ("queued", "running")]
    parts = [compiles_text(target), *[k for k in known if k]]
    if pending:
        parts.append(f"compiling {', '.join(pending)}")
    if target.get("non_monotone"):
        parts.append("not monotone: checking the rest of the range")
    return f"[{target['target']}] {target['status']}: " + " · ".join(parts)


def compiles_text(target: dict[str, Any]) -> str:
    """The compiles of a target's search, those that checked an answer apart."""
    done, checks = target["probes_done"], target.get("checks_done") or 0
    searched = f"{done - checks} compile{'' if done - checks == 1 else 's'}"
    return f"{searched} + {checks} to check" if checks else searched


def _verdict(t: dict[str, Any], value: int, peak: int | None, refused: str | None) -> str:
    """One side of the proof in exact bytes: the value, and why it fits or does not."""
    usable = t.get("usable_bytes")
    if refused is not None:
        need = f" (it needs at least {peak:,} bytes)" if peak is not None else ""
        return f"{value:,}: does not fit: refused by libtpu{need}"
    figure = "not reported" if peak is None else f"{peak:,} bytes"
    if t["rule"] == "libtpu":
        return f"{value:,}: fits: libtpu compiled it, peak {figure}"
    if peak is None or usable is None:
        return f"{value:,}: peak {figure}"
    if peak <= usable:
        return f"{value:,}: fits: peak {figure} ≤ {usable:,} usable"
    return f"{value:,}: does not fit: peak {figure} > {usable:,} usable"


def _answer(t: dict[str, Any], lo: int) -> list[str]:
    """A found target's answer and its proof: the compile at it and at the next value."""
    largest = t["largest_fitting"]
    above = _verdict(t, t["value_above"] or lo, t["peak_bytes_above"], t["refused_above"])
    if largest is None:
        return [f"none: even {lo:,} does not fit", above]
    at = _verdict(t, largest, t["peak_bytes_at_largest"], None)
    if t["largest_is_hi"]:
        return [f"{largest:,}, the top of the range (a larger value may fit too)", at]
    return [f"{largest:,}", at, above]


def table(fit: dict[str, Any]) -> list[str]:
    """The answer per target as text, the way the page's table reads, its proof in bytes."""
    lo, hi = fit["range"]
    dim = fit["dimension"]
    lines = [f"largest {dim} that fits, in {lo:,} … {hi:,} (step {fit.get('step', 1):,}):"]
    for t in fit["targets"]:
        if t["status"] != "found":
            answer = [f"{t['status']}{': ' + t['reason'] if t['reason'] else ''}"]
        else:
            answer = _answer(t, lo)
        lines.append(f"  {t['target']:<9} {answer[0]}")
        lines += [f"  {'':<9}   {line}" for line in answer[1:]]
        if t.get("non_monotone"):
            pairs = ", ".join(f"{a:,} → {b:,}" for a, b in t["non_monotone_probes"][:4])
            lines.append(
                f"  {'':<9} not monotone: the peak falls as {dim} grows ({pairs}); the search "
                "checked the rest of the range, and a value it did not compile may fit above"
            )
        lines.append(f"  {'':<9} {t['criterion']}; {compiles_text(t)}")
    return lines


def follow(server: ServerAddress, token: str | None, fit_id: str, *, quiet: bool) -> dict[str, Any]:
    """The search once it ended, its progress said on stderr as it changes; a server that
    restarts on the way is waited for (`wait_ended`), as the search itself survives it."""
    said: dict[str, str] = {}

    def seen(fit: dict[str, Any]) -> None:
        for target in fit["targets"]:
            line = progress_line(target)
            if not quiet and said.get(target["target"]) != line:
                print(line, file=sys.stderr, flush=True)
                said[target["target"]] = line

    def lost(why: str) -> None:
        print(f"server unreachable ({why}); retrying", file=sys.stderr, flush=True)

    async def wait() -> dict[str, Any]:
        async with server.async_client(token, timeout=60.0) as client:
            return await wait_ended(client, f"/api/v1/fits/{fit_id}", seen=seen, lost=lost)

    return anyio.run(wait)


def fit_command(argv: list[str]) -> int:
    args = build_parser().parse_intermixed_args(argv)
    server: ServerAddress = args.server
    token = args.token or os.environ.get(SUBMIT_TOKEN_ENV) or None
    with server.client(token, timeout=60.0) as client:
        try:
            body = search_body(args, _artifact(args.program, client, server))
        except (UsageError, ValueError) as exc:
            print(f"boundary fit: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        response = client.post("/api/v1/fits", json=body)
        if response.status_code != 202:
            print(
                f"boundary fit: the server refused the search: {refusal_text(response)}",
                file=sys.stderr,
            )
            return EXIT_REFUSED
        fit_id = response.json()["id"]
        page = server.link(f"/fits/{fit_id}")
        print(f"fit search {fit_id}: {page}", file=sys.stderr)
        try:
            fit = follow(server, token, fit_id, quiet=args.json)
        except KeyboardInterrupt:
            client.post(f"/api/v1/fits/{fit_id}/cancel")
            print(f"cancelled the search: {page}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except (Refused, ServerLost) as exc:
            print(f"boundary fit: stopped following the search {fit_id}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if args.json:
        print(json.dumps(fit, indent=1))
    else:
        print("\n".join([*table(fit), f"fit page  {page}"]))
    return EXIT_OK if fit["status"] == "done" else EXIT_FAILED
