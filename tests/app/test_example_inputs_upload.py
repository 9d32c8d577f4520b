"""The example's arrays on the server: `boundary export-fn --upload` (in this process,
against an in-process app) uploads them and its CPU run uses them as `params.inputs`; an
example over the server's upload cap is refused in plain words; a job's inputs file and
input rules are checked against the artifact's arguments before it is queued."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.main import create_app
from app.settings import Settings
from tests.app.test_upload_sources import ThreadTransport
from tests.workers.test_example_inputs import MODEL
from workers.cli.export_fn import EXIT_OK, EXIT_UPLOAD_FAILED, export_command
from workers.export.server_address import ServerAddress

pytestmark = pytest.mark.anyio

OCTET = {"Content-Type": "application/octet-stream"}
CAP = 100_000
"""The server's upload cap here: the artifact fits, the `large` example's 131 kB do not."""


@pytest.fixture
async def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An in-process app that export-fn's own (synchronous) upload client talks to."""
    settings = Settings(DB=tmp_path / "db.sqlite3", CACHE_DIR=tmp_path / "c", UPLOAD_MAX_BYTES=CAP)
    app = create_app(settings)
    transport = ThreadTransport(app, asyncio.get_running_loop())
    monkeypatch.setattr(
        ServerAddress,
        "client",
        lambda self, token=None, timeout=30.0: httpx.Client(transport=transport, base_url=self.url),
    )
    return app


async def export_fn(
    capsys: pytest.CaptureFixture[str], folder: Path, example: str, *extra: str
) -> tuple[int, dict[str, Any], str]:
    """`boundary export-fn` run in a thread of this process: (status, summary, stderr)."""
    model = folder / "example_inputs_model.py"
    model.write_text(MODEL)
    argv = [f"{model}:forward", "--example", f"{model}:{example}", "--platforms", "cpu,tpu"]
    argv += ["-o", str(folder / f"{example}.jaxexport"), *extra]
    status = await asyncio.to_thread(export_command, argv)
    said = capsys.readouterr()
    return status, json.loads(said.out) if said.out.strip() else {}, said.err


async def test_the_upload_sends_the_examples_inputs_and_its_cpu_run_uses_them(
    server: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flags = ["--save-output-sample", "40", "--upload", "http://t", "--target", "v6e:1x1"]
    status, summary, said = await export_fn(capsys, tmp_path, "given", *flags)
    assert status == EXIT_OK, said
    uploaded = summary["uploaded"]
    assert uploaded["inputs"] == summary["run_inputs"]["sha256"]
    assert (
        uploaded["inputs"]
        == hashlib.sha256(Path(summary["run_inputs"]["file"]).read_bytes()).hexdigest()
    )
    transport = httpx.ASGITransport(app=server)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        jobs = {
            j["target"]: (await client.get(f"/api/v1/jobs/{j['id']}")).json()
            for j in uploaded["jobs"]
        }
        stored = (await client.get(f"/api/v1/artifacts/{uploaded['inputs']}")).json()
        page = (await client.get(f"/artifacts/{uploaded['artifact']}")).text
    cpu = jobs[None]["params"]
    assert cpu["inputs"] == uploaded["inputs"] and cpu["reference"] == uploaded["reference"]
    assert "inputs" not in jobs["v6e:1x1"]["params"]  # a compile draws nothing
    assert stored["kind"] == "npz"
    assert f'name="inputs" value="{uploaded["inputs"]}"' in page  # the run form starts with them


async def test_an_example_over_the_upload_cap_is_refused_saying_what_to_do(
    server: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flags = ["--save-output-sample", "40", "--upload", "http://t"]
    status, summary, said = await export_fn(capsys, tmp_path, "large", *flags)
    assert status == EXIT_UPLOAD_FAILED
    assert summary["uploaded"]["artifact"] and summary["uploaded"]["jobs"] == []
    assert "the server refused the npz file (HTTP 413:" in said
    assert "The example's arrays are the runs' inputs" in said
    assert "give the large ones as jax.ShapeDtypeStruct" in said and "--generated-inputs" in said
    assert "BOUNDARY_UPLOAD_MAX_BYTES" in said and "Traceback" not in said
    # Drawn instead: nothing of the example's values is sent, and the upload goes through.
    status, summary, said = await export_fn(capsys, tmp_path, "large", *flags, "--generated-inputs")
    assert status == EXIT_OK, said
    assert "inputs" not in summary["uploaded"] and len(summary["uploaded"]["jobs"]) == 1


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


async def test_a_jobs_inputs_file_and_rules_are_checked_against_the_arguments(
    client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, summary, said = await export_fn(capsys, tmp_path, "given")
    assert status == EXIT_OK, said
    shas = []
    for data, kind in (
        (Path(summary["file"]).read_bytes(), "exported"),
        (npz(token=np.zeros((4, 6), np.int32)), "npz"),
        (npz(tokens=np.zeros((4, 6), np.int32)), "npz"),
    ):
        r = await client.post(
            "/api/v1/artifacts", params={"kind": kind}, content=data, headers=OCTET
        )
        assert r.status_code == 201, r.text
        shas.append(r.json()["sha256"])
    artifact, typo, tokens = shas

    async def problem(**params: Any) -> dict[str, str]:
        body = {
            "workload": "exported",
            "path": "jax-cpu",
            "params": {"artifact": artifact, **params},
        }
        r = await client.post("/api/v1/jobs", json=body)
        assert r.status_code == 422, r.text
        found: dict[str, str] = r.json()["detail"][0]
        return found

    named = await problem(inputs=typo)
    assert named["field"] == "params.inputs"
    assert "token names no argument (did you mean: tokens" in named["message"]
    ruled = await problem(
        inputs=tokens, input_rules={"tokens": {"kind": "int", "low": 0, "high": 3}}
    )
    assert ruled["field"] == "params.input_rules.tokens"
    assert "names only arguments whose values are given (tokens)" in ruled["message"]
    # The weights it leaves out may be ruled: queued.
    body = {
        "workload": "exported",
        "path": "jax-cpu",
        "params": {
            "artifact": artifact,
            "inputs": tokens,
            "input_rules": {"params/*": {"kind": "ones"}},
        },
    }
    assert (await client.post("/api/v1/jobs", json=body)).status_code == 202
