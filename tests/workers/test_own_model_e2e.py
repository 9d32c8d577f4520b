"""End to end, as a user goes: the tests' own three programs exported with `boundary
export-fn --example`, uploaded to a real server, the forward pass compiled by a real worker
for v6e:1x1, v6e:2x4, b200:1 and h100:8 from the one command and run on the CPU on the
example's own weights and tokens (uploaded with it), the two train steps (the 8-device one
on 8 virtual CPUs) under input rules; each run checked against a sample.

The train step's and the 8-device step's compiles for targets are the browser's to ask for
(tests/browser/test_own_model_browser.py, from the artifact page's form, each row held to
plain JAX's peak there); here the 8-device step is refused the one-device targets."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.workers.own_exports import TARGETS, assert_peak_as_plain_jax, export_fn
from tests.workers.test_agent_e2e import Cluster, cluster  # noqa: F401 - the fixture
from tests.workers.test_export_e2e import upload
from workers.protocol import parse_target

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_three_programs_from_export_to_targets_and_checked_cpu_runs(
    cluster: Callable[..., Cluster],  # noqa: F811 - the imported fixture
    own_exports: dict[str, Any],
    tmp_path: Path,
) -> None:
    c = cluster(JOB_TIMEOUT_S="280")
    c.start_server()
    # The train step and its 8-device twin, uploaded through the API.
    digests = {
        name: upload(c.client, own_exports[name].artifact.read_bytes(), "exported")
        for name in ("train", "dp")
    }
    _refuses_fewer_devices(c, own_exports["dp"], digests["dp"])  # before a worker is there
    c.start_worker("w1")
    c.wait_worker("w1", timeout=120)

    # The forward pass goes the whole way in one command: export, upload (the example's
    # arrays as the inputs), one compile per target and a jax-cpu run on those inputs
    # checked against its sample.
    model = Path(__file__).with_name("own_model.py")
    done = export_fn(
        [
            f"{model}:forward",
            "--example",
            f"{model}:forward_example",
            "-o",
            str(tmp_path / "forward.jaxexport"),
            "--save-output-sample",
            "64",
            "--upload",
            c.url,
            *[f"--target={t}" for t in TARGETS],
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    uploaded = summary["uploaded"]
    assert uploaded["artifact"] == summary["sha256"]
    assert uploaded["inputs"] == summary["run_inputs"]["sha256"]  # the example's own arrays
    assert summary["run_inputs"]["example"] == summary["arguments"]
    jobs: dict[tuple[str, str | None], str] = {
        ("forward", j["target"]): j["id"] for j in uploaded["jobs"]
    }
    assert set(jobs) == {("forward", None), *(("forward", t) for t in TARGETS)}

    # The train step and its 8-device twin, run through the API.
    for name, sha in digests.items():
        exported = own_exports[name]
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
            if name == "forward":
                assert job["params"]["inputs"] == uploaded["inputs"]
            continue
        report = run["target"]
        assert report["deviceless"] and report["id"] == target
        assert_peak_as_plain_jax(exported, target, report["memory"]["peak_bytes"])
        assert report["mesh"]

    # The artifact's page (and its JSON twin) lists one row per target, each fitting, each
    # after the first linked to its HLO diffed with the first's.
    page = c.client.get(f"/artifacts/{uploaded['artifact']}.json").json()
    rows = {row["target"]: row for row in page["fit"]}
    assert set(rows) == set(TARGETS)
    assert all(row["fits"] and row["verdict"].startswith("Fits:") for row in rows.values())
    first, second = rows[TARGETS[0]], rows[TARGETS[1]]
    assert second["compare"] == f"/compare?a={first['job']}&b={second['job']}&ir=hlo"
    assert page["one_click"] == ["v6e:2x4", "h100:8", "b200:8"]


def _refuses_fewer_devices(c: Cluster, exported: Any, sha: str) -> None:
    """The 8-device step (uploaded as `sha`), asked for on a target with fewer devices:
    refused at once, naming both counts; on those with 8 it is accepted (and cancelled
    while queued: the browser's test compiles it)."""
    for target in TARGETS:
        body = {
            "workload": "exported",
            "path": "jax-tpu" if target.startswith("v6e") else "jax-gpu",
            "target": target,
            "params": {"artifact": sha, "input_rules": exported.rules},
        }
        r = c.client.post("/api/v1/jobs", json=body)
        if exported.fits(target):
            assert r.status_code == 202, r.text
            cancelled = c.client.post(f"/api/v1/jobs/{r.json()['id']}/cancel").json()
            assert cancelled["status"] == "cancelled"
            continue
        assert r.status_code == 422, r.text
        (problem,) = r.json()["detail"]
        assert problem["field"] == "target"
        count = parse_target(target).count
        assert f"exported for 8 devices and {target} has {count}" in problem["message"]


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
    assert "refused the exported file (HTTP 401" in bare.stderr
    given = export_fn(args, tmp_path, env={"BOUNDARY_SUBMIT_TOKEN": c.env["BOUNDARY_SUBMIT_TOKEN"]})
    assert given.returncode == 0, given.stderr[-2000:]
    (job,) = json.loads(given.stdout)["uploaded"]["jobs"]
    assert job["target"] == "b200:1" and job["path"] == "jax-gpu"
    assert c.job(job["id"])["status"] == "queued"  # no worker here: it waits, visibly
