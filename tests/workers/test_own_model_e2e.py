"""End to end, as a user goes: the tests' own three programs exported with `boundary
export-fn --example`, uploaded to a real server, compiled by a real worker for
v6e:1x1, v6e:2x4, b200:1 and h100:8 where their device count fits, and run on the CPU
(the 8-device step on 8 virtual CPUs) under input rules, checked against a sample."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import pytest

from tests.workers.own_exports import TARGETS, export_fn
from tests.workers.test_agent_e2e import Cluster, cluster  # noqa: F401 - the fixture
from tests.workers.test_export_e2e import upload
from workers.export.meshes import argument_shardings
from workers.protocol import parse_target
from workers.xla_targets.topology import target_devices

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def plain_peak(artifact: Path, target_id: str) -> int:
    """What a user would write: `jax.jit(exp.call).lower(*args, **kwargs).compile()` on
    the target's devices, and the compiler's own peak per device."""
    exp = jax.export.deserialize(bytearray(artifact.read_bytes()))
    devices = target_devices(parse_target(target_id))
    structs = [
        jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
        for a, s in zip(exp.in_avals, argument_shardings(exp, devices), strict=True)
    ]
    args, kwargs = jax.tree.unflatten(exp.in_tree, structs)
    compiled = jax.jit(exp.call).lower(*args, **kwargs).compile()
    return int(compiled.memory_analysis().peak_memory_in_bytes)


def test_three_programs_from_export_to_targets_and_checked_cpu_runs(
    cluster: Callable[..., Cluster],  # noqa: F811 - the imported fixture
    own_exports: dict[str, Any],
    tmp_path: Path,
) -> None:
    c = cluster(JOB_TIMEOUT_S="280")
    c.start_server()
    c.start_worker("w1")
    c.wait_worker("w1", timeout=120)

    # The forward pass goes the whole way in one command: export, upload, one compile per
    # target and a jax-cpu run checked against its sample.
    forward = own_exports["forward"]
    model = Path(__file__).with_name("own_model.py")
    done = export_fn(
        [
            f"{model}:forward",
            "--example",
            f"{model}:forward_example",
            "-o",
            str(tmp_path / "forward.jaxexport"),
            "--input-rules",
            json.dumps(forward.rules),
            "--save-output-sample",
            "64",
            "--upload",
            c.url,
            *[f"--target={t}" for t in TARGETS],
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    uploaded = json.loads(done.stdout)["uploaded"]
    assert uploaded["artifact"] == json.loads(done.stdout)["sha256"]
    jobs: dict[tuple[str, str | None], str] = {
        ("forward", j["target"]): j["id"] for j in uploaded["jobs"]
    }
    assert set(jobs) == {("forward", None), *(("forward", t) for t in TARGETS)}

    # The train step and its 8-device twin, uploaded and submitted through the API.
    digests = {"forward": uploaded["artifact"]}
    for name in ("train", "dp"):
        exported = own_exports[name]
        sha = upload(c.client, exported.artifact.read_bytes(), "exported")
        digests[name] = sha
        reference = upload(c.client, exported.sample.read_bytes(), "npz")
        params = {"artifact": sha, "input_rules": exported.rules}
        jobs[(name, None)] = c.submit(
            {
                "workload": "exported",
                "path": "jax-cpu",
                "params": {**params, "reference": reference},
                "measure": {"samples": 3},
            }
        )
        for target in TARGETS:
            body = {
                "workload": "exported",
                "path": "jax-tpu" if target.startswith("v6e") else "jax-gpu",
                "target": target,
                "params": params,
            }
            r = c.client.post("/api/v1/jobs", json=body)
            if exported.fits(target):
                assert r.status_code == 202, r.text
                jobs[(name, target)] = r.json()["id"]
                continue
            # More devices than the target has: refused at once, naming both counts.
            assert r.status_code == 422, r.text
            (problem,) = r.json()["detail"]
            assert problem["field"] == "target"
            count = parse_target(target).count
            assert f"exported for 8 devices and {target} has {count}" in problem["message"]

    for (name, target), job_id in jobs.items():
        job = c.wait_status(job_id, {"done", "failed", "expired"}, timeout=600)
        assert job["status"] == "done", (name, target, job["reason"])
        run = job["run"]
        exported = own_exports[name]
        if target is None:  # the CPU run: every result checked against the sample
            verdict = run["correctness"]
            assert run["valid"] and verdict["passed"] and verdict["checked"], verdict
            assert len(verdict["results"]) == len(exported.summary["results"])
            assert verdict["reference"] == "an uploaded sample of the reference outputs"
            assert run["environment"]["device_count"] == exported.devices
            assert [i["name"] for i in run["inputs"]] == exported.summary["arguments"]
            continue
        report = run["target"]
        assert report["deviceless"] and report["id"] == target
        peak = report["memory"]["peak_bytes"]
        plain = plain_peak(exported.artifact, target)
        assert abs(peak - plain) <= 0.1 * plain, (name, target, peak, plain)
        assert report["mesh"]
        if name == "dp":  # the gradient's all-reduce, from the target's partitioner
            kinds = [k["kind"] for k in run["hlo_summary"]["collectives"]]
            assert "all-reduce" in kinds, (target, kinds)

    # The artifact's page (and its JSON twin) lists one row per target, each fitting.
    page = c.client.get(f"/artifacts/{digests['dp']}.json").json()
    rows = {row["target"]: row for row in page["fit"]}
    assert set(rows) == {"v6e:2x4", "h100:8"}
    assert all(row["fits"] and row["verdict"].startswith("Fits:") for row in rows.values())
    assert any("all-reduce" in c for c in rows["h100:8"]["collectives"])
    assert rows["h100:8"]["compare"] == (
        f"/compare?a={rows['v6e:2x4']['job']}&b={rows['h100:8']['job']}&ir=hlo"
    )
    assert page["one_click"] == ["v6e:2x4", "h100:8", "b200:8"]


def test_the_upload_presents_the_submission_token_from_the_environment(
    cluster: Callable[..., Cluster],  # noqa: F811 - the imported fixture
    own_exports: dict[str, Any],
    tmp_path: Path,
) -> None:
    c = cluster(SUBMIT_TOKEN="a-submission-token-of-some-length")
    c.start_server()
    model = Path(__file__).with_name("own_model.py")
    args = [f"{model}:forward", "--example", f"{model}:forward_example"]
    args += ["-o", str(tmp_path / "f.jaxexport"), "--upload", c.url, "--target", "b200:1"]
    bare = export_fn(args, tmp_path, env={"BOUNDARY_SUBMIT_TOKEN": ""})
    assert bare.returncode == 4, bare.stderr  # the server's refusal, named
    assert "refused the exported file (401" in bare.stderr
    given = export_fn(args, tmp_path, env={"BOUNDARY_SUBMIT_TOKEN": c.env["BOUNDARY_SUBMIT_TOKEN"]})
    assert given.returncode == 0, given.stderr[-2000:]
    (job,) = json.loads(given.stdout)["uploaded"]["jobs"]
    assert job["target"] == "b200:1" and job["path"] == "jax-gpu"
    assert c.job(job["id"])["status"] == "queued"  # no worker here: it waits, visibly
