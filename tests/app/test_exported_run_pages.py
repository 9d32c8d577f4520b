"""What a person sees around an uploaded function's runs: the run page's "Reproduce it"
command taken by `boundary run` as shown (input rules as JSON), the link from a run to its
artifact and the artifact's list of its runs, and the artifact page's run form, which
uses the reference sample uploaded with the artifact as `export-fn --upload` does."""

from __future__ import annotations

import html
import re
import shlex
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.workers.own_exports import Exported, export_program

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OCTET = {"Content-Type": "application/octet-stream"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def forward(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The tests' one-device forward pass, exported with input rules and a sampled
    reference, as a user runs `boundary export-fn`."""
    return export_program("forward", tmp_path_factory.mktemp("forward"))


async def upload(client: httpx.AsyncClient, data: bytes, kind: str = "exported") -> str:
    r = await client.post("/api/v1/artifacts", params={"kind": kind}, content=data, headers=OCTET)
    assert r.status_code == 201, r.text
    sha: str = r.json()["sha256"]
    return sha


async def queue(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    r = await client.post("/api/v1/jobs", json={"workload": "exported", **body})
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


async def uploaded_as_export_fn_does(
    client: httpx.AsyncClient, forward: Exported
) -> tuple[str, str, str]:
    """What `export-fn --upload URL` leaves on a server: the artifact, its sample, and a
    jax-cpu run checked against the sample (workers/cli/export_upload.py's bodies)."""
    sha = await upload(client, forward.artifact.read_bytes())
    sample = await upload(client, forward.sample.read_bytes(), "npz")
    params = {"artifact": sha, "seed": 0, "input_rules": forward.rules, "reference": sample}
    cpu = await queue(client, {"path": "jax-cpu", "params": params})
    return sha, sample, cpu


class FormFields(HTMLParser):
    """The (name, value) pairs a browser would post from the form whose action ends with
    `action`: inputs, selected options and textareas."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action, self.inside, self.fields = action, False, []
        self.select: str | None = None
        self.textarea: str | None = None
        self.first_option: dict[str, str] = {}
        self.option: str | None = None
        self.selected = False
        self.chosen: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("action", "").endswith(self.action)
        if not self.inside:
            return
        if tag == "input" and a.get("type") not in ("checkbox", "submit") and "name" in a:
            self.fields.append((a["name"], a.get("value", "")))
        elif tag == "select":
            self.select = a["name"]
        elif tag == "option" and self.select is not None:
            self.option = a.get("value")  # None: the option's text is its value
            self.selected = "selected" in a
            if self.option is not None:
                self.took_option(self.option)
        elif tag == "textarea":
            self.textarea = a["name"]
            self.fields.append((a["name"], ""))

    def took_option(self, value: str) -> None:
        assert self.select is not None
        self.first_option.setdefault(self.select, value)
        if self.selected:
            self.fields.append((self.select, value))
            self.chosen.add(self.select)

    def handle_data(self, data: str) -> None:
        if self.inside and self.select is not None and self.option is None and data.strip():
            self.option = data.strip()
            self.took_option(self.option)
        if self.inside and self.textarea is not None:
            name, before = self.fields.pop()
            self.fields.append((name, before + data))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.inside:
            for name, value in self.first_option.items():
                if name not in self.chosen:
                    self.fields.append((name, value))
            self.inside = False
        elif tag == "select":
            self.select = None
        elif tag == "option":
            self.option = ""
        elif tag == "textarea":
            self.textarea = None


def form_of(page: str, action: str) -> list[tuple[str, str]]:
    parser = FormFields(action)
    parser.feed(page)
    return parser.fields


async def test_the_reproduce_command_of_an_exported_run_is_taken_as_shown(
    client: httpx.AsyncClient, forward: Exported
) -> None:
    from workers.cli.run import build_job, build_parser

    sha, _, job_id = await uploaded_as_export_fn_does(client, forward)
    page = (await client.get(f"/runs/{job_id}")).text
    section = page.split('id="repro-h"', 1)[1]
    commands = [html.unescape(c) for c in re.findall(r"<code>(boundary run .*?)</code>", section)]
    assert len(commands) == 2 and "--server http" in commands[1]
    for command in commands:
        words = shlex.split(command)  # as a shell splits the pasted line
        job = build_job(build_parser().parse_args(words[2:]))
        assert job.params["input_rules"] == forward.rules
        assert job.params["artifact"] == sha
        # The server takes the job the command describes (what --server posts).
        r = await client.post("/api/v1/jobs", json=job.model_dump(mode="json"))
        assert r.status_code == 202, r.text


async def test_a_run_links_to_its_artifact_and_the_artifact_lists_its_runs(
    client: httpx.AsyncClient, forward: Exported
) -> None:
    from app.pages.artifact import RUNS_LISTED

    sha, _, cpu = await uploaded_as_export_fn_does(client, forward)
    page = (await client.get(f"/runs/{cpu}")).text
    assert f'href="/artifacts/{sha}"' in page  # the exported run's way back to its function
    assert f'href="/artifacts/{sha}">its page</a>, with every run of it' in page
    target = {"path": "jax-tpu", "target": "v6e:1x1", "stages": ["compile"]}
    compile_ = await queue(client, {**target, "params": {"artifact": sha}})
    page = (await client.get(f"/artifacts/{sha}")).text
    runs = page.split('id="runs-h"', 1)[1]
    listed = re.findall(r'data-run="([^"]+)"', runs)
    assert listed == [compile_, cpu]  # the CPU run too, newest first
    cpu_row = runs.split(f'data-run="{cpu}"', 1)[1].split("</tr>", 1)[0]
    assert "<code>jax-cpu</code>" in cpu_row
    assert "run with a reference" in cpu_row
    assert "<code>v6e:1x1</code>" in runs.split(f'data-run="{compile_}"', 1)[1].split("</tr>")[0]
    assert "newest (the rest are under" not in runs
    more = [
        await queue(client, {"path": "jax-cpu", "params": {"artifact": sha, "seed": n}})
        for n in range(RUNS_LISTED)
    ]
    runs = (await client.get(f"/artifacts/{sha}")).text.split('id="runs-h"', 1)[1]
    assert re.findall(r'data-run="([^"]+)"', runs) == more[::-1]  # bounded: the newest only
    assert f"the {RUNS_LISTED} newest (the rest are under" in runs


async def test_the_run_form_uses_the_reference_uploaded_with_the_artifact(
    bench_client: httpx.AsyncClient, forward: Exported, tmp_path: Path
) -> None:
    from tests.app.test_artifacts import run_one
    from workers.files import FileCache

    sha, sample, cpu = await uploaded_as_export_fn_does(bench_client, forward)
    r = await bench_client.post(f"/api/v1/jobs/{cpu}/cancel")  # only the form's run runs here
    assert r.status_code in (200, 202), r.text
    page = (await bench_client.get(f"/artifacts/{sha}")).text
    assert f"as run <code>{cpu}</code>" in re.sub(r"<a [^>]*>|</a>", "", page)
    fields = dict(form_of(page, f"/artifacts/{sha}/runs"))
    assert fields["reference"] == sample and fields["seed"] == "0"
    fields["samples"] = "3"
    r = await bench_client.post(
        f"/artifacts/{sha}/runs", content=str(httpx.QueryParams(fields)), headers=FORM
    )
    assert r.status_code == 303, re.findall(r"class=\"error\">([^<]*)", r.text)
    job_id = r.headers["location"].rsplit("/", 1)[1]
    params = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["params"]
    assert params["reference"] == sample and params["input_rules"] == forward.rules
    job = await run_one(bench_client, FileCache(tmp_path / "files"))
    assert job["id"] == job_id
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Correct within tolerance" in page and "no reference outputs were uploaded" not in page


async def test_an_unchecked_result_says_why_once(
    bench_client: httpx.AsyncClient, forward: Exported, tmp_path: Path
) -> None:
    from tests.app.test_artifacts import run_one
    from workers.files import FileCache

    sha = await upload(bench_client, forward.artifact.read_bytes())
    params = {"artifact": sha, "input_rules": forward.rules}
    body = {"path": "jax-cpu", "params": params, "measure": {"samples": 3}}
    job_id = await queue(bench_client, body)
    job = await run_one(bench_client, FileCache(tmp_path / "files"))
    assert job["id"] == job_id and job["run"]["correctness"]["checked"] is False
    page = (await bench_client.get(f"/runs/{job_id}")).text
    verdict = page.split('id="verdict"', 1)[1].split("</div>", 1)[0]
    assert "<h2>Output unchecked</h2>" in verdict  # said once, then why
    assert "<p>No reference outputs were uploaded, and " in verdict
    assert "output unchecked:" not in verdict
    row = page.split('data-result="', 1)[1].split("</tr>", 1)[0]
    assert '<td class="warn">unchecked: the reference holds nothing' in row
    assert "output unchecked" not in row
