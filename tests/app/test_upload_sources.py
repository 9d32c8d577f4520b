"""The Python lines sent with an uploaded program, as a person meets them: `boundary
export-fn` writes the lines its program names beside the artifact (or none with
`--no-source`), the upload keeps them with the function, and the run pages of its runs
show each line next to its `file:line` (or say plainly that none was sent). The text is
the user's: malformed documents are refused naming the field, and what is shown is
escaped."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from html import escape, unescape
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.ir.sent import SentLines
from app.ir.view import NONE_SENT, build_view
from app.main import create_app
from app.settings import Settings
from tests.app.built import build_app, state_of
from tests.workers.own_exports import MODEL, ROOT, Exported, export_program
from workers.export.sources import SOURCES_FORMAT, SOURCES_MEDIA_TYPE

pytestmark = pytest.mark.anyio

OCTET = {"Content-Type": "application/octet-stream"}
MODEL_LINES = MODEL.read_text().splitlines()
SENT_TITLE = "Your Python lines, as boundary export-fn sent them"


def document(artifact: str, lines: dict[str, str], path: str = str(MODEL)) -> bytes:
    body = {
        "format": SOURCES_FORMAT,
        "artifact": artifact,
        "files": [{"path": path, "lines": lines}],
    }
    return json.dumps(body).encode()


async def upload(client: httpx.AsyncClient, data: bytes, kind: str = "exported") -> httpx.Response:
    return await client.post(
        "/api/v1/artifacts", params={"kind": kind}, content=data, headers=OCTET
    )


def text_of(markup: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", markup))


# --- fast: the panel, the refusals, retention ----------------------------------------------

META = 'metadata={op_name="jit(f)/%s" source_file="/home/me/model.py" source_line=%d}'
HLO = "\n".join(
    [
        "HloModule m",
        "ENTRY %main (p: f32[4]) -> f32[4] {",
        "  %p = f32[4]{0} parameter(0)",
        "  %m = f32[4]{0} multiply(f32[4]{0} %p, f32[4]{0} %p), " + META % ("mul", 9),
        "  ROOT %a = f32[4]{0} add(f32[4]{0} %m, f32[4]{0} %p), " + META % ("add", 3),
        "}",
        "",
    ]
)


def row_of(markup: str, key: str) -> str:
    """The text of the panel's row for source `key`."""
    return text_of(
        markup.split(f'id="S-{escape(key)}"', 1)[1].split(">", 1)[1].split("</div>", 1)[0]
    )


def test_the_panel_shows_the_lines_sent_escaped_and_says_which_were_not() -> None:
    sent = SentLines({"/home/me/model.py": {2: "def f(x):", 3: '    <script>alert("x")</script>'}})
    view = build_view(
        "hlo", HLO, "/runs/r/ir/hlo", sent=sent, uploaded=True, src="/home/me/model.py:3"
    )
    assert view.source_title == SENT_TITLE
    panel = str(view.source)
    assert "<script>" not in panel and "&lt;script&gt;" in panel  # the user's text, escaped
    assert row_of(panel, "/home/me/model.py:3") == '3×1    <script>alert("x")</script>'
    assert 'class="sl s3 sel"' in panel  # the selected line (?src=)
    assert "def f(x):" in text_of(panel)  # a line around it
    assert row_of(panel, "/home/me/model.py:9") == "×1/home/me/model.py:9 (line not sent)"
    bare = build_view("hlo", HLO, "/runs/r/ir/hlo", uploaded=True)
    assert bare.source_title == NONE_SENT
    assert "No Python lines were sent with this program" in NONE_SENT


async def test_malformed_or_misplaced_lines_are_refused_naming_the_field(
    client: httpx.AsyncClient,
) -> None:
    from tests.app.test_artifacts import export

    function = export(["cpu"])
    sha = hashlib.sha256(function).hexdigest()
    # Lines for a function the server does not keep: upload the function first.
    r = await upload(client, document(sha, {"1": "x"}), "sources")
    assert r.status_code == 422
    assert r.json()["detail"][0]["message"] == (
        f"sources: artifact: no uploaded function {sha[:12]}…: upload its .jaxexport first"
    )
    assert (await upload(client, function)).status_code == 201
    r = await upload(client, document(sha, {"0": "x"}), "sources")
    assert r.status_code == 422
    assert r.json()["detail"][0]["message"] == (
        'sources: files[0].lines["0"]: a line number is a whole number from 1'
    )
    r = await upload(
        client, b'{"format": "boundary-sources/1", "artifact": 1, "files": []}', "sources"
    )
    assert r.json()["detail"][0]["message"] == (
        "sources: artifact: the SHA-256 of the .jaxexport (64 hex digits)"
    )
    # The form: lines written for another function, and lines over their own cap.
    other = document("cd" * 32, {"1": "x"})
    r = await client.post(
        "/artifacts",
        files={"artifact": ("f.jaxexport", function), "sources": ("f.sources.json", other)},
    )
    assert r.status_code == 422
    error = re.search(r'<p class="error" id="e-sources">([^<]*)</p>', r.text)
    assert error is not None and unescape(error[1]).startswith(
        "artifact: these lines were written for the function cdcdcdcdcdcd…, not for the one"
    )
    huge = b" " * (256 * 1024 + 1)
    r = await client.post(
        "/artifacts",
        files={"artifact": ("f.jaxexport", function), "sources": ("f.sources.json", huge)},
    )
    assert r.status_code == 413 and 'id="e-sources"' in r.text
    r = await client.post(
        "/artifacts",
        files={
            "artifact": ("f.jaxexport", function),
            "sources": ("f.sources.json", document(sha, {"7": "y = 1"})),
        },
    )
    assert r.status_code == 303, r.text
    assert "sources=" not in r.headers["location"]
    info = (await client.get(f"/api/v1/artifacts/{sha}")).json()
    assert info["sources"]["lines"] == 1 and info["sources"]["files"] == 1
    page = (await client.get(f"/artifacts/{sha}")).text
    assert "1 line of 1 file, sent by <code>boundary export-fn</code>" in page


async def test_the_lines_stay_with_their_function_and_go_with_it(tmp_path: Path) -> None:
    from app.queue.uploads import sources_media
    from workers.catalog.exported import EXPORT_MEDIA_TYPE

    settings = Settings(DB=tmp_path / "db.sqlite3", FILES_RETAIN_DAYS=0.5 / 86400)
    dispatcher = state_of(build_app(settings)).dispatcher
    store = dispatcher.store
    function = store.put_file(b"a function", EXPORT_MEDIA_TYPE)
    older = store.put_file(document(function, {"1": "old"}), sources_media(function))
    await asyncio.sleep(0.05)
    newer = store.put_file(document(function, {"1": "new"}), sources_media(function))
    orphan = store.put_file(document("ef" * 32, {"1": "x"}), sources_media("ef" * 32))
    dispatcher.prune()
    assert store.file_info(function) is not None and store.file_info(newer) is not None
    assert store.file_info(older) is None and store.file_info(orphan) is None
    assert store.newest_file(sources_media(function)).sha256 == newer  # type: ignore[union-attr]
    # Past FILES_RETAIN_DAYS the function expires: its lines go with it.
    deadline = time.monotonic() + 10
    while store.file_info(function) is not None:
        assert time.monotonic() < deadline, "the function was still kept after 10 s"
        await asyncio.sleep(0.05)
        dispatcher.prune()
    assert store.file_info(newer) is None
    assert SOURCES_MEDIA_TYPE in sources_media(function)


class ThreadTransport(httpx.BaseTransport):
    """A synchronous transport, for a client used in a thread, that answers through an
    in-process app on the test's event loop (export-fn's upload client is synchronous)."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def answer() -> httpx.Response:
            request.stream = httpx.ByteStream(request.read())
            response = await self.inner.handle_async_request(request)
            body = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=body)

        return asyncio.run_coroutine_threadsafe(answer(), self.loop).result(timeout=60)


async def test_export_fn_sends_the_lines_and_goes_on_when_they_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.app.test_artifacts import export
    from workers.cli import export_upload
    from workers.export.server_address import ServerAddress

    app = create_app(Settings(DB=tmp_path / "db.sqlite3", CACHE_DIR=tmp_path / "cache"))
    transport = ThreadTransport(app, asyncio.get_running_loop())
    monkeypatch.setattr(
        ServerAddress,
        "client",
        lambda self, token=None, timeout=30.0: httpx.Client(transport=transport, base_url=self.url),
    )
    server = ServerAddress.parse("http://t")
    function = export(["cpu"])
    sha = hashlib.sha256(function).hexdigest()
    lines = document(sha, {"3": "    return x @ w"})
    common: dict[str, Any] = {
        "sample": None,
        "rules": None,
        "seed": 0,
        "targets": [],
        "token": None,
    }
    send = export_upload.upload_all
    done = await asyncio.to_thread(send, server, function, sources=lines, **common)
    assert done["artifact"] == sha and done["sources"] == hashlib.sha256(lines).hexdigest()
    bad = document(sha, {"3": "a\nb"})
    done = await asyncio.to_thread(send, server, function, sources=bad, **common)
    assert done["artifact"] == sha and "sources" not in done
    assert done["sources_refused"] == (
        "the server refused the sources file (HTTP 422: body: sources: "
        'files[0].lines["3"]: one line, without line breaks)'
    )


# --- slow: a real export-fn, a real run, the pages ------------------------------------------


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The forward pass exported as a user does: its lines written beside it."""
    return export_program("forward", tmp_path_factory.mktemp("sent"))


@pytest.fixture(scope="module")
def unsent(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The same, with `--no-source`."""
    return export_program("forward", tmp_path_factory.mktemp("unsent"), "--no-source")


@pytest.mark.slow
def test_export_fn_writes_the_lines_its_program_names_unless_told_not_to(
    sent: Exported, unsent: Exported
) -> None:
    summary = sent.summary["sources"]
    where = Path(summary["file"])
    assert where == sent.artifact.with_suffix(".sources.json") and where.is_file()
    assert summary["sha256"] == hashlib.sha256(where.read_bytes()).hexdigest()
    body = json.loads(where.read_text())
    assert body["artifact"] == sent.summary["sha256"] and not body["cut"]
    (model,) = [f for f in body["files"] if f["path"] == str(MODEL)]
    assert model["lines"] and all(
        text == MODEL_LINES[int(n) - 1] for n, text in model["lines"].items()
    )
    assert not [f for f in body["files"] if f["path"].startswith(f"{ROOT}/workers/")]
    assert summary["lines"] == sum(len(f["lines"]) for f in body["files"])
    assert unsent.summary["sources"] is None
    assert not unsent.artifact.with_suffix(".sources.json").exists()


async def run_forward(client: httpx.AsyncClient, exported: Exported, tmp_path: Path) -> str:
    """Upload the function (and its lines, when export-fn wrote them) and run it here on
    the CPU, as a worker would; the run's id."""
    from tests.app.test_artifacts import run_one
    from workers.files import FileCache

    assert (await upload(client, exported.artifact.read_bytes())).status_code == 201
    if exported.summary["sources"]:
        lines = Path(exported.summary["sources"]["file"]).read_bytes()
        r = await upload(client, lines, "sources")
        assert r.status_code == 201, r.text
        assert r.json()["kind"] == "sources"
    params = {"artifact": exported.summary["sha256"], "input_rules": exported.rules}
    body = {"workload": "exported", "path": "jax-cpu", "params": params, "measure": {"samples": 3}}
    assert (await client.post("/api/v1/jobs", json=body)).status_code == 202
    job = await run_one(client, FileCache(tmp_path / "files"))
    return str(job["id"])


@pytest.mark.slow
async def test_the_run_pages_show_the_python_line_beside_its_file_and_line(
    bench_client: httpx.AsyncClient, sent: Exported, tmp_path: Path
) -> None:
    job = await run_forward(bench_client, sent, tmp_path)
    page = (await bench_client.get(f"/runs/{job}")).text
    cells = re.findall(
        rf'href="/runs/{job}/ir/hlo\?src=[^"]+">([^<]+)</a> <code class="src-line">([^<]*)</code>',
        page,
    )
    assert cells, "no fusion names a line sent with the program"
    for key, text in cells:
        file, line = unescape(key).rsplit(":", 1)
        assert file == str(MODEL) and unescape(text) == MODEL_LINES[int(line) - 1].strip()
    key = unescape(cells[0][0])
    view = (await bench_client.get(f"/runs/{job}/ir/hlo", params={"src": key})).text
    assert f'<h3 class="meta">{SENT_TITLE}' in view
    assert row_of(view, key).endswith(MODEL_LINES[int(key.rsplit(":", 1)[1]) - 1])
    assert "sel" in view.split(f'id="S-{escape(key)}"', 1)[0].rsplit("<div", 1)[1]
    artifact = (await bench_client.get(f"/artifacts/{sent.summary['sha256']}")).text
    assert f"{sent.summary['sources']['lines']} lines of 1 file, sent by" in artifact


@pytest.mark.slow
async def test_without_lines_the_run_pages_say_none_were_sent(
    bench_client: httpx.AsyncClient, unsent: Exported, tmp_path: Path
) -> None:
    job = await run_forward(bench_client, unsent, tmp_path)
    page = (await bench_client.get(f"/runs/{job}")).text
    assert "No Python lines were sent with this program" in text_of(page)
    assert 'class="src-line"' not in page
    assert re.search(rf'href="/runs/{job}/ir/hlo\?src=[^"]+">[^<]+own_model\.py:\d+</a>', page)
    view = (await bench_client.get(f"/runs/{job}/ir/hlo")).text
    assert f'<h3 class="meta">{escape(NONE_SENT)}' in view
    artifact = (await bench_client.get(f"/artifacts/{unsent.summary['sha256']}")).text
    assert "None sent: run pages show <code>file:line</code> only." in artifact
