"""Every rule of the table forged by its kind: one field of an honest run changed to anything
its type allows, and what the server then refuses, drops or publishes.

The honest runs are a real run on a TPU v5e (as its server published it, with a few parts a
chip run does not have added), a real upload on that chip, and runs of the kinds a chip
run is not (a target compiled without the hardware, a shape sweep, a scaling series with a
worker group, the cuda path with its baselines), each one the server accepts whole. For a
rule, a field it governs is forged in a run that has it, and the kind's promise is held:

- checked: refused naming the field (or a part that holds it), or shown as sent or as the
  honest run shows it: never anything else;
- server: nothing of it survives the post;
- bounded: withheld, shown as sent, as the honest run shows it, or brought within bounds
  (a number between 0 and what was sent, a list or table trimmed), never a NaN;
- recomputed: what the honest run shows, withheld, or a verdict lowered: never what was sent;
- text: withheld, or the words sent cut short (no rate where the rule drops those).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from app.dispatch.results import prepare
from tests.app.bench_fakes import capabilities, run_result
from workers.catalog import parse_params
from workers.catalog.published import published, refusals, without_server_fields
from workers.catalog.result_rules import RULES, Rule
from workers.catalog.rule_checks import Lease
from workers.catalog.rule_kinds import RATE_IN_WORDS, Bound, Recompute, Text, governed
from workers.catalog.rule_walk import leaf_types, split
from workers.protocol import Capabilities, Platform, RunResult
from workers.protocol.memory import published_report

DATA = Path(__file__).parents[1] / "workers" / "data" / "chip_runs.jsonl"
MISSING = object()
"""What a place holds once the part that held it is gone."""
Location = tuple[Any, ...]

# --- the honest runs ------------------------------------------------------------------------


def _chip_runs() -> list[dict[str, Any]]:
    return [json.loads(line)["run"] for line in DATA.read_text().splitlines()]


def _caps(platform: str, **changes: Any) -> Capabilities:
    return Capabilities.model_validate(capabilities(platform, **changes))


CHIP_CAPS = {"device_kind": "TPU v5 lite", "paths": ["jax-tpu"]}
PROFILE = {
    "size": 2048,
    "sha256": "ab" * 32,
    "files": ["plugins/profile/r/host.xplane.pb"],
    "covers": "the sampled calls",
    "calls": 20,
    "device": "TPU v5 lite",
}
PIPELINE = {
    "steps": [{"order": 1, "pipeline": "p", "changed": "a", "snapshot": 0}],
    "snapshots": ["HloModule m"],
    "capture_s": 0.5,
}


def _chip() -> tuple[RunResult, Lease]:
    run = _chip_runs()[0]
    run["extra"].update(
        compile_only=False,
        sizes_distinct=3,
        output_sha256="cd" * 32,
        sampled="all",
        kernel={"kernel": "xla", "blocks": {"block_m": 128}},
    )
    run["measurements"][0].update(stopped_because="20 samples taken", note="steady")
    run["warnings"] = ["an honest warning"]
    run["kernel_resources"] = [
        {"name": "k", "arch": "sm_90", "registers": 32, "shared_bytes": 0, "barriers": 1}
    ]
    run["placement"] = {
        "devices": 1,
        "mesh_shape": [1],
        "axis_names": ["x"],
        "shards": [{"device": 0}],
        "memory": [{"device": 0, "argument_bytes": 8, "peak_bytes": 16, "source": "xla"}],
    }
    run["profile"] = PROFILE
    run["pipeline"] = PIPELINE
    run["kernel_pipelines"] = {"kernel": PIPELINE}
    run["ceilings"] = {"device_kind": "TPU v5 lite", "measured_at": "2026-12-06T00:00:00"}
    run["environment"]["cache_events"] = {"hits": 0, "misses": 1, "time_saved_s": None}
    # A block the compiler reserves whole, as the memory report lists it (this record of the
    # chip's run predates blocks): its 512 bytes of temporaries, none live at the peak.
    top = {"instruction": "fusion", "bytes": 512, "offset": 0, "live": [1, 2],
           "op_name": "jit(matmul)/dot_general", "source": None}  # fmt: skip
    run["memory_report"]["blocks"] = [
        {"name": "temporaries (allocation 2)", "bytes": 512, "set_by": top,
         "why": "the heap of temporaries, as tall as its highest value"}
    ]  # fmt: skip
    return _today(RunResult.model_validate(run)), Lease(run["job"], _caps("tpu", **CHIP_CAPS))


def _today(run: RunResult) -> RunResult:
    """A chip's recorded run with its memory report as today's rule compares it (the
    record was published under an earlier one): an honest report once published."""
    m = run.memory_analysis
    assert m is not None
    report = published_report(
        run.memory_report, platform=Platform.TPU, peak=m.peak_bytes, temp=m.temp_bytes
    )
    return run.model_copy(update={"memory_report": report})


UPLOAD_DTYPES = {"out0": "float32"}
"""The uploaded program's one result, as its header names it."""


def _upload() -> tuple[RunResult, Lease]:
    run = _chip_runs()[-1]
    lease = Lease(run["job"], _caps("tpu", **CHIP_CAPS), UPLOAD_DTYPES)
    return _today(RunResult.model_validate(run)), lease


def _target() -> tuple[RunResult, Lease]:
    spec = {"workload": "matmul", "path": "jax-tpu", "target": "v5e:1x1", "params": {"m": 64}}
    run = run_result(spec)
    run["measurements"] = []
    run["memory_analysis"] = {"argument_bytes": 16384, "output_bytes": 16384, "peak_bytes": 40000}
    run["target"] = {
        "id": "v5e:1x1",
        "model": "v5e",
        "count": 1,
        "compiler": "libtpu",
        "compiler_version": "0.0.42",
        "deviceless": True,
        "notes": ["an honest note"],
        "memory": {
            "peak_bytes": 40000,
            "argument_bytes": 16384,
            "output_bytes": 16384,
            "generated_code_bytes": 4096,
            "usable_bytes": 15 * 2**30,
            "usable_source": "libtpu's reading",
            "hbm_bytes": 1,
            "hbm_label": "x",
            "source": "x",
        },
        "kernels": [
            {
                "kernel": "fusion",
                "bundles": 300,
                "non_empty_bundles": 200,
                "mxu_ops": 10,
                "mxu_pushes": 4,
                "vmem_bytes": 4096,
            }
        ],
    }
    return RunResult.model_validate(run), Lease(run["job"], _caps("cpu"))


def _sweep() -> tuple[RunResult, Lease]:
    spec = {
        "workload": "shape-sweep",
        "path": "jax-cpu",
        "params": {"shapes": [3, 5, 8], "features": 16, "out_features": 16, "bucketing": "pow2"},
    }
    run = run_result(spec)
    params = parse_params("shape-sweep", spec["params"])
    policies, measurements = [], []
    for policy in params.policies():
        samples = [3e-4, 3.3e-4, 3.1e-4]
        measurements.append(
            {
                "boundary": "host-sync",
                "samples_s": samples,
                "stats": None,
                "subject": f"bucketing {policy}",
            }
        )
        padded, flops, useful, waste = params.policy_figures(policy)
        policies.append(
            {
                "policy": policy,
                "padded_sizes": padded,
                "traces": 2,
                "compilations": 2,
                "compile_s": 0.2,
                "trace_s": 0.01,
                "lower_s": 0.01,
                "first_pass_s": 0.5,
                "flops": flops,
                "useful_flops": useful,
                "padding_waste_pct": waste,
            }
        )
    run["measurements"] = measurements
    run["sweep"] = {"op": "dense", "sizes": params.sizes(), "policies": policies, "note": "n"}
    return RunResult.model_validate(run), Lease(run["job"], _caps("cpu"))


def _scale() -> tuple[RunResult, Lease]:
    spec = {
        "workload": "sharded-matmul",
        "path": "jax-cpu",
        "stages": ["compile", "execute", "scale"],
        "params": {"m": 64, "n": 64, "k": 64, "devices": 2},
    }
    run = run_result(spec)
    point = {
        "devices": 1,
        "mode": "strong",
        "mesh_shape": [1],
        "samples_s": [2e-4, 3e-4],
        "correct": True,
        "error": 1e-7,
        "collectives": [],
        "note": "one device",
    }
    run["scaling"] = {"label": "virtual devices", "points": [point], "skipped": []}
    member = {"local_devices": 1, "passed": True, "error": 1e-7, "digest": "d"}
    run["group"] = {
        "processes": 2,
        "coordinator": "127.0.0.1:1",
        "devices": 2,
        "agreed": True,
        "members": [{**member, "process_id": 0}, {**member, "process_id": 1}],
    }
    return RunResult.model_validate(run), Lease(run["job"], _caps("cpu", device_count=2))


def _cuda() -> tuple[RunResult, Lease]:
    spec = {"workload": "matmul", "path": "cuda", "params": {"m": 64, "n": 64, "k": 64}}
    run = run_result(spec)
    kernel = {"boundary": "device-events", "samples_s": [2e-5, 3e-5], "stats": None}
    run["measurements"] = [{**kernel, "subject": "kernel"}, {**kernel, "subject": "cuBLAS"}]
    verdict = {"passed": True, "error": 1e-7, "tolerance": 1e-5}
    run["extra"] = {
        "baselines": {"cuBLAS": verdict},
        "comparison": [],
        "cuda": {"kernel": "tiled", "launches": [{"kernel": "k", "grid": [1], "block": [32]}]},
    }
    caps = _caps("gpu", paths=["cuda"], cuda_compile=True, cuda_run=True)
    return RunResult.model_validate(run), Lease(run["job"], caps)


@cache
def bases() -> dict[str, tuple[RunResult, Lease]]:
    return {
        "chip": _chip(),
        "upload": _upload(),
        "target": _target(),
        "sweep": _sweep(),
        "scale": _scale(),
        "cuda": _cuda(),
    }


def served(run: RunResult, lease: Lease, rule: Rule) -> RunResult:
    """What the server publishes of a posted `run`: its rules (`published`, with an
    upload's result dtypes), or, for a rule the server works out from the text it stores
    (the HLO summary), the whole of what it stores (`prepare`)."""
    if isinstance(rule.by, Recompute) and rule.by.later and "server" in rule.by.later:
        return prepare(
            run, artifact_max_bytes=2**22, inline_bytes=2**16, pipeline_max_bytes=2**22
        ).run
    return published(run, result_dtypes=lease.dtypes)


@cache
def honest(name: str, rule: Rule) -> RunResult:
    run, lease = bases()[name]
    return served(run, lease, rule)


def test_every_honest_run_is_accepted_and_valid() -> None:
    for name, (run, lease) in bases().items():
        assert refusals(run, lease) == {}, name
        assert published(run, result_dtypes=lease.dtypes).valid, name


# --- places and values ------------------------------------------------------------------------


def located(root: Any, path: str) -> Iterator[Location]:
    """Each concrete location of the field at `path` in `root`: attribute names, list
    indices and dict keys from the root."""
    holder, name = split(path)
    found: list[tuple[Location, Any]] = [((), root)]
    for part in holder.split(".") if holder else []:
        step, how = (part[:-2], part[-2:]) if part.endswith(("[]", "{}")) else (part, "")
        nxt = []
        for loc, owner in found:
            value = _get(owner, step)
            if value is None or value is MISSING:
                continue
            if how == "[]":
                nxt += [((*loc, step, i), item) for i, item in enumerate(value)]
            elif how == "{}":
                nxt += [((*loc, step, k), item) for k, item in value.items()]
            else:
                nxt.append(((*loc, step), value))
        found = nxt
    for loc, owner in found:
        if _get(owner, name) is not MISSING:
            yield (*loc, name)


def _get(owner: Any, key: Any) -> Any:
    if isinstance(owner, BaseModel):
        return getattr(owner, key, MISSING)
    if isinstance(owner, dict):
        return owner.get(key, MISSING)
    if isinstance(owner, list):
        return owner[key] if isinstance(key, int) and key < len(owner) else MISSING
    return MISSING


def value_at(root: Any, loc: Location, like: Any = None) -> Any:
    """What `root` holds at `loc`; MISSING where it holds nothing, or, given the run it
    came from (`like`), where a list on the way lost or gained items (the place is gone)."""
    value, before = root, like
    for key in loc:
        if isinstance(key, int) and like is not None and _length(value) != _length(before):
            return MISSING
        value, before = _get(value, key), _get(before, key) if like is not None else None
        if value is MISSING or (value is None and key != loc[-1]):
            return MISSING
    return value


def _length(x: Any) -> int | None:
    return len(x) if isinstance(x, list) else None


def forged(run: RunResult, loc: Location, value: Any) -> RunResult | None:
    """`run` with `value` at `loc`, read again as a posted run is (None: no JSON of this
    shape is a run result)."""
    data = run.model_dump()
    owner: Any = data
    for key in loc[:-1]:
        owner = owner[key]
    owner[loc[-1]] = value
    try:
        return RunResult.model_validate(data)
    except ValidationError:
        return None


def values(annotation: Any) -> st.SearchStrategy[Any]:
    """Anything a field of this type may be sent as (and a few things it may not)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any or annotation is object:
        return JSON
    if origin is Union or type(annotation).__name__ == "UnionType":
        return st.one_of(*(values(a) for a in args))
    if origin is Literal:
        return st.sampled_from(args)
    if isinstance(annotation, type) and hasattr(annotation, "__members__"):  # an enum
        return st.sampled_from(list(annotation))
    if hasattr(annotation, "__metadata__"):  # Annotated
        return values(args[0])
    if origin is list:
        return st.lists(values(args[0]), max_size=4)
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), values(args[1]), max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, bool):
        return st.booleans()
    if isinstance(annotation, type) and issubclass(annotation, int):
        return st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([0, -1, 1, 2**62]))
    if isinstance(annotation, type) and issubclass(annotation, float):
        return st.one_of(st.floats(), st.sampled_from([0.0, -1.0, 1e-12, 1e12]))
    if isinstance(annotation, type) and issubclass(annotation, str):
        return WORDS
    if annotation is type(None):
        return st.none()
    raise AssertionError(f"no values for {annotation!r}")


WORDS = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["12 GB/s", "it reached 987.6 TFLOP/s", "x" * 5_000, ""]),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | WORDS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


# --- the promise of each kind ------------------------------------------------------------------


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def withheld(x: Any) -> bool:
    """Nothing shown: no value, an empty one, or an object that says it is withheld (a
    memory report whose figures disagree)."""
    said = x.get("withheld") if isinstance(x, dict) else getattr(x, "withheld", None)
    return x is MISSING or x is None or x in ([], {}) or bool(said)


def trimmed(shown: Any, sent: Any) -> bool:
    """`shown` is `sent` brought within bounds: a number between 0 and what was sent, a
    claim lowered (false for true), words cut short, or a list or table of what was sent,
    each part so."""
    if isinstance(shown, bool) or isinstance(sent, bool):
        return shown is False and sent is True
    if isinstance(shown, str) and isinstance(sent, str):
        return sent.startswith(shown)
    if _number(shown) and _number(sent):
        return math.isfinite(shown) and 0 <= shown <= max(sent, 0)
    if isinstance(shown, list) and isinstance(sent, list):
        return all(any(s == t or trimmed(s, t) for t in sent) for s in shown)
    if isinstance(shown, dict) and isinstance(sent, dict):
        return all(k in sent and (v == sent[k] or trimmed(v, sent[k])) for k, v in shown.items())
    if isinstance(shown, BaseModel) and isinstance(sent, BaseModel):
        return trimmed(shown.model_dump(), sent.model_dump())
    return False


def cut_short(shown: Any, sent: Any, spec: Text) -> bool:
    """`shown` is the words `sent`, capped (a list: some of its items, each capped)."""
    if isinstance(shown, str) and isinstance(sent, str):
        rate_free = not (spec.no_rate and RATE_IN_WORDS.search(shown))
        return sent.startswith(shown) and rate_free
    if isinstance(shown, list) and isinstance(sent, list):
        return all(any(cut_short(s, t, spec) for t in sent) for s in shown)
    return False


def related(field: str, loc: Location) -> bool:
    """A refusal's field names the forged place, or a part that holds it."""
    named = field.removeprefix("result.")
    here = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in loc).lstrip(".")
    return here.startswith(named) or named.startswith(here)


def held(rule: Rule, base: str, loc: Location, sent: Any) -> None:
    """The promise of `rule`'s kind, for `sent` forged at `loc` of the honest run `base`."""
    run, lease = bases()[base]
    lie = forged(run, loc, sent)
    assume(lie is not None)
    assert lie is not None
    if rule.kind == "server":
        assert withheld(value_at(without_server_fields(lie), loc))
        return
    refused = refusals(lie, lease)
    if rule.kind == "checked" and refused:
        fields = [f for problems in refused.values() for f, _ in problems]
        assert any(related(f, loc) for f in fields), (loc, fields)
        return
    assume(not refused)  # a lie of another field's rule: its own test holds it
    sent = value_at(lie, loc)  # as the posted JSON reads
    scope = _scope_loc(rule, loc)
    if scope is not None:  # a bound on the whole object: judged whole
        loc, sent = scope, value_at(lie, scope)
    shown = value_at(served(lie, lease, rule), loc, like=lie)
    truth = value_at(honest(base, rule), loc)
    if rule.kind == "recomputed":
        lowered = shown is False and truth is True
        assert shown == truth or withheld(shown) or lowered, (loc, sent, shown, truth)
    elif rule.kind == "text" and isinstance(rule.by, Text):
        assert withheld(shown) or shown == sent or cut_short(shown, sent, rule.by), (loc, shown)
    else:  # bounded, or checked and let through
        assert withheld(shown) or shown in (sent, truth) or trimmed(shown, sent), (loc, shown)
        assert not (isinstance(shown, float) and math.isnan(shown)), loc


def _scope_loc(rule: Rule, loc: Location) -> Location | None:
    """The location of the object a scoped bound judges whole, within `loc`."""
    scope = rule.by.scope if isinstance(rule.by, Bound) else None
    if scope is None:
        return None
    steps = [s.removesuffix("[]") for s in scope.split(".")]
    found: list[Any] = []
    for key in loc:
        if not steps:
            break
        found.append(key)
        if key == steps[0]:
            steps.pop(0)
    return tuple(found) if not steps else None


# --- every rule -------------------------------------------------------------------------------


@cache
def _governed() -> dict[str, Rule]:
    return governed(RULES)


def places(rule: Rule) -> list[tuple[str, Location, Any]]:
    """(base, location, the field's type) of every place `rule` governs in the honest runs."""
    types = leaf_types()
    found = []
    for path, owner in _governed().items():
        if owner is rule:
            for base, (run, _) in bases().items():
                kind = types.get(path, Any)
                found += [(base, loc, kind) for loc in located(run, path)]
    return found


@pytest.mark.parametrize("rule", RULES, ids=[f"{r.kind} {r.pattern}" for r in RULES])
def test_a_forged_field_is_refused_dropped_or_ruled_by_its_kind(rule: Rule) -> None:
    where = places(rule)
    assert where, f"no honest run has a field {rule.pattern} governs: add one"

    @given(data=st.data())
    @settings(
        max_examples=6,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def forge(data: st.DataObject) -> None:
        base, loc, kind = data.draw(st.sampled_from(where))
        held(rule, base, loc, data.draw(values(kind)))

    forge()


def test_a_posted_share_of_the_hbm_is_the_leased_jobs_or_refused() -> None:
    """A GPU compile's usable bytes follow its job's `usable_fraction`: a worker that posts
    a larger share than it leased (to make a program fit the whole HBM) is refused."""
    spec = {"workload": "matmul", "path": "jax-gpu", "target": "h100:1", "params": {"m": 64}}
    leased = {**spec, "usable_fraction": 0.5}
    run = run_result(leased)
    run["measurements"] = []
    lease = Lease(run["job"], _caps("cpu"))
    assert refusals(RunResult.model_validate(run), lease) == {}
    for posted in ({**leased, "usable_fraction": 1.0}, spec):
        forged = RunResult.model_validate({**run, "job": run_result(posted)["job"]})
        said = refusals(forged, lease).get(422, [])
        assert (
            "result.job.usable_fraction",
            "differs from the leased job's usable_fraction",
        ) in said
