"""What a person sees around an uploaded function's runs: the run page's "Reproduce it"
command taken by `boundary run` as shown (input rules as JSON), the link from a run to its
artifact and the artifact's list of its runs, and the artifact page's run form, which
uses the reference sample uploaded with the artifact as `export-fn --upload` does."""

from __future__ import annotations

import html
import re
import shlex
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from tests.workers.own_exports import Exported, export_program

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OCTET = {"Content-Type": "application/octet-stream"}


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
            self.first_option.setdefault(self.select, a.get("value", ""))
            if "selected" in a:
                self.fields.append((self.select, a.get("value", "")))
                self.chosen.add(self.select)
        elif tag == "textarea":
            self.textarea = a["name"]
            self.fields.append((a["name"], ""))

    def handle_data(self, data: str) -> None:
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
