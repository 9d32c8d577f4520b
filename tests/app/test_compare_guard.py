"""The comparison guard: each kind of mismatch is refused with the right explanation, and a
pair that changes one experimental variable is let through with that variable named.

The runs are real engine runs (JAX on the CPU); a variation changes only what the test
is about (a parameter, an option, the device label) in the job JSON the API returns.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.pages.compare.guard import Guarded, guard, run_facts
from workers.measure.faults import perturbed
from workers.protocol import JobSpec
from workers.run.engine import run_job

SPEC: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 48, "n": 40, "k": 32},
    "measure": {"samples": 5},
}


def _job(result: dict[str, Any], job_id: str) -> dict[str, Any]:
    """The job JSON `job_public` returns for a finished job with this run."""
    spec = result["job"]
    return {
        "id": job_id,
        "status": "done",
        "workload": spec["workload"],
        "path": spec["path"],
        "params": spec["params"],
        "stages": spec["stages"],
        "measure": spec["measure"],
        "run": result,
    }


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    """Real runs: latency, dispatch and throughput modes, and one with a wrong output."""
    out = {}
    for name, measure in (
        ("latency", {}),
        ("dispatch", {"mode": "dispatch"}),
        ("throughput", {"mode": "throughput", "calls_per_sample": 2}),
    ):
        spec = copy.deepcopy(SPEC)
        spec["measure"].update(measure)
        out[name] = run_job(JobSpec.model_validate(spec)).model_dump(mode="json")
    with perturbed(0.5):
        out["wrong"] = run_job(JobSpec.model_validate(SPEC)).model_dump(mode="json")
    return out


def variant(result: dict[str, Any], job_id: str, **changes: Any) -> dict[str, Any]:
    """A copy of a run's job JSON with dotted keys changed, e.g. {'params.m': 64}."""
    job = _job(copy.deepcopy(result), job_id)
    for dotted, value in changes.items():
        path = dotted.split(".")
        for target in (job, job["run"]["job"]) if path[0] in ("params", "measure") else (job,):
            node = target
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        if path[0] == "params":
            job["run"]["params"][path[-1]] = value
    return job


def check(a: list[dict[str, Any]], b: list[dict[str, Any]], **kw: Any) -> Guarded:
    return guard([run_facts(j) for j in a], [run_facts(j) for j in b], **kw)


def only_mismatch(g: Guarded, variable: str) -> str:
    assert not g.comparable
    names = [m.variable for m in g.mismatches]
    assert variable in names, names
    return next(m.why for m in g.mismatches if m.variable == variable)


@pytest.mark.parametrize(
    ("change", "variable", "why"),
    [
        ({"workload": "reduction"}, "workload", "different workloads are different problems"),
        ({"params.m": 64}, "params.m", "a different problem"),
        ({"params.dtype": "bfloat16"}, "dtype", "storage type changes the bytes moved"),
        ({"params.precision": "highest"}, "precision", "contraction precision changes"),
        ({"measure.cache": "warm"}, "cache policy", "what compilation may reuse"),
        ({"measure.profile": True}, "measure.profile", "not the experiment"),
    ],
)
def test_each_controlled_variable_that_differs_is_refused(
    runs: dict[str, dict[str, Any]], change: dict[str, Any], variable: str, why: str
) -> None:
    a = variant(runs["latency"], "a1")
    b = variant(runs["latency"], "b1", **change)
    g = check([a], [b])
    explanation = only_mismatch(g, variable)
    assert why in explanation
    found = next(m for m in g.mismatches if m.variable == variable)
    assert found.a != found.b


def test_a_different_mode_is_a_different_boundary_too(runs: dict[str, dict[str, Any]]) -> None:
    g = check([variant(runs["latency"], "a1")], [variant(runs["throughput"], "b1")])
    assert "call pattern" in only_mismatch(g, "mode")
    assert "different work" in only_mismatch(g, "boundary")
    assert (g.boundary_a, g.boundary_b) == ("host-sync", "host-throughput")


def _event_delimited(result: dict[str, Any], job_id: str) -> dict[str, Any]:
    """The run's job JSON reshaped as the cuda path reports it: a device-events interval
    beside host-sync, both under the subject 'kernel', device-events the main one."""
    job = variant(result, job_id, path="cuda")
    run = job["run"]
    host = run["measurements"][0]
    events = {**copy.deepcopy(host), "boundary": "device-events"}
    run["measurements"] = [{**events, "subject": "kernel"}, {**host, "subject": "kernel"}]
    run["rates"]["boundary"] = "device-events"
    return job


def test_dispatch_only_against_event_delimited_is_refused_with_the_guides_reason(
    runs: dict[str, dict[str, Any]],
) -> None:
    a = variant(runs["dispatch"], "a1")
    b = _event_delimited(runs["latency"], "b1")
    g = check([a], [b])
    why = only_mismatch(g, "boundary")
    assert "dispatch-only timing" in why and "event-delimited" in why
    assert "no implementation speedup" in why
    assert (g.boundary_a, g.boundary_b) == ("host-dispatch", "device-events")
    assert "mode" in [m.variable for m in g.mismatches]


def test_dispatch_timings_are_never_compared_even_with_each_other(
    runs: dict[str, dict[str, Any]],
) -> None:
    g = check([variant(runs["dispatch"], "a1")], [variant(runs["dispatch"], "b1")])
    assert "never a speed" in only_mismatch(g, "boundary")


def test_host_sync_against_device_events_points_at_the_boundary_both_report(
    runs: dict[str, dict[str, Any]],
) -> None:
    a = variant(runs["latency"], "a1", path="jax-gpu")
    b = _event_delimited(runs["latency"], "b1")
    g = check([a], [b])
    assert "different work" in only_mismatch(g, "boundary")
    assert g.suggest_boundary == "host-sync"
    fair = check([a], [b], boundary="host-sync")
    assert fair.comparable, (fair.mismatches, fair.problems)
    assert [e[0] for e in fair.experimental] == ["path", "implementation"]


def test_a_failed_correctness_run_cannot_be_compared(runs: dict[str, dict[str, Any]]) -> None:
    g = check([variant(runs["latency"], "a1")], [variant(runs["wrong"], "b1")])
    assert not g.comparable
    assert any("b1 failed its correctness check" in p for p in g.problems)


def test_a_side_must_hold_repeats_of_one_job(runs: dict[str, dict[str, Any]]) -> None:
    a = [variant(runs["latency"], "a1"), variant(runs["latency"], "a2", **{"params.k": 16})]
    g = check(a, [variant(runs["latency"], "b1")])
    assert not g.comparable
    assert any("side A mixes configurations: run a2 has params.k = 16" in p for p in g.problems)


def test_one_experimental_variable_is_named_and_let_through(
    runs: dict[str, dict[str, Any]],
) -> None:
    a = [variant(runs["latency"], f"a{i}") for i in range(3)]
    b = []
    for i in range(3):
        job = variant(runs["latency"], f"b{i}")
        job["run"]["environment"]["device_kind"] = "a second CPU model"
        b.append(job)
    g = check(a, b)
    assert g.comparable and not g.warnings
    assert g.experimental == [("device", "1 × CPU", "1 × a second CPU model")]
    assert g.controlled["params.m"] == "48" and g.controlled["mode"] == "latency"


def test_implementation_and_version_are_experimental(runs: dict[str, dict[str, Any]]) -> None:
    a = variant(runs["latency"], "a1", path="cuda", **{"params.kernel": "naive"})
    b = variant(runs["latency"], "b1", path="cuda", **{"params.kernel": "tiled"})
    b["run"]["environment"]["jax_version"] = "0.99.0"
    g = check([a], [b])
    assert g.comparable, g.mismatches
    assert [e[0] for e in g.experimental] == ["implementation", "version"]
    assert g.warnings and "cannot be attributed to one" in g.warnings[0]


def test_the_same_job_on_both_sides_is_an_a_a_comparison(
    runs: dict[str, dict[str, Any]],
) -> None:
    g = check([variant(runs["latency"], "a1")], [variant(runs["latency"], "b1")])
    assert g.comparable and g.experimental == [] and g.mismatches == []


def test_on_a_jax_path_the_implementation_is_xla_whatever_kernel_says(
    runs: dict[str, dict[str, Any]],
) -> None:
    # kernel= picks a CUDA C++ kernel; a JAX run that carries it still ran what XLA chose.
    a = variant(runs["latency"], "a1", **{"params.kernel": "naive"})
    b = variant(runs["latency"], "b1", **{"params.kernel": "tiled"})
    g = check([a], [b])
    assert g.comparable and g.experimental == []
    assert run_facts(a).experimental["implementation"] == "XLA"


def test_devices_are_named_readably(runs: dict[str, dict[str, Any]]) -> None:
    cpu = run_facts(variant(runs["latency"], "c1")).experimental["device"]
    assert cpu == "1 × CPU"
    compiled = variant(runs["latency"], "c2")
    compiled["run"]["environment"].update(
        platform="none", device_kind="compiled for sm_90", device_count=0
    )
    assert run_facts(compiled).experimental["device"] == "no device (compiled for sm_90)"


def _compiled_upload(job_id: str, target: str, params: dict[str, Any]) -> dict[str, Any]:
    """An uploaded program's compile-only job for `target`, as the API returns it."""
    sha = "ab" * 32
    return {
        "id": job_id,
        "status": "done",
        "workload": "exported",
        "path": "jax-tpu" if target.startswith("v6e") else "jax-gpu",
        "target": target,
        "stages": ["compile"],
        "params": {"artifact": sha, **params},
        "run": {"valid": True, "params": {"artifact": sha, **params}, "measurements": []},
    }


def test_input_values_do_not_make_two_compiles_incomparable() -> None:
    """The artifact page queues its compiles with the artifact alone, export-fn with a seed
    and input rules: neither can change what the compiler compiles."""
    rules = {"x": {"kind": "normal"}}
    a = run_facts(_compiled_upload("a", "v6e:2x4", {}))
    b = run_facts(_compiled_upload("b", "h100:8", {"seed": 7, "input_rules": rules}))
    checked = guard([a], [b])
    assert checked.comparable and checked.mismatches == []
    assert checked.experimental == [("target", "v6e:2x4", "h100:8")]
    other = run_facts(_compiled_upload("c", "h100:8", {"artifact": "cd" * 32}))
    assert not guard([a], [other]).comparable  # another program is another problem
