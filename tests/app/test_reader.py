"""The reader's views, their JSON twins, fragments, 404s and the guide, in-process."""

from __future__ import annotations

import re

import httpx
import pytest

from app.reader.content import READER_PATHS, READER_STAGES, load_content
from app.settings import Settings
from workers.protocol import PathId, StageId

pytestmark = pytest.mark.anyio

ALL_VIEWS = [(p.value, s.value) for p in READER_PATHS for s in READER_STAGES]


def current(html: str, attr: str) -> list[str]:
    """Values of `data-<attr>` on links marked aria-current inside the selectors."""
    return re.findall(rf'aria-current="page" data-{attr}="([a-z-]+)"', html)


async def test_home_opens_on_the_default_example(client: httpx.AsyncClient) -> None:
    content = load_content()
    r = await client.get("/")
    assert r.status_code == 200
    html = r.text
    assert content.site.headline in html
    assert 'id="no-side-effects"' in html
    assert "Current example" in html
    assert 'href="/guide"' in html
    assert current(html, "path") == ["jax-gpu"]
    assert current(html, "stage") == ["compile"]
    assert content.card(READER_PATHS[0], READER_STAGES[0]).title in html


@pytest.mark.parametrize(("path", "stage"), ALL_VIEWS)
async def test_every_view_has_its_own_card_and_json_twin(
    client: httpx.AsyncClient, path: str, stage: str
) -> None:
    content = load_content()
    r = await client.get(f"/read/{path}/{stage}")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    html = r.text
    assert current(html, "path") == [path]
    assert current(html, "stage") == [stage]
    card = content.cards[
        (
            READER_PATHS[[p.value for p in READER_PATHS].index(path)],
            READER_STAGES[[s.value for s in READER_STAGES].index(stage)],
        )
    ]
    assert card.title in html
    # The diagram highlights the selected stage, server-side.
    assert f'<svg class="diagram diagram-wide" data-stage="{stage}"' in html
    assert f'<svg class="diagram diagram-tall" data-stage="{stage}"' in html
    # Each card links to its guide section.
    assert f'href="/guide#{card.guide_section}"' in html

    j = await client.get(f"/read/{path}/{stage}.json")
    assert j.status_code == 200
    data = j.json()
    assert data["card"]["title"] == card.title
    assert data["card"]["code"]["text"] == card.code.text
    assert data["path"]["id"] == path and data["stage"]["id"] == stage
    assert data["links"]["self"] == f"/read/{path}/{stage}"
    assert data["diagram"]["boundary"]["stage"] == stage


async def test_titles_differ_across_all_nine_views(client: httpx.AsyncClient) -> None:
    titles = set()
    for path, stage in ALL_VIEWS:
        titles.add((await client.get(f"/read/{path}/{stage}.json")).json()["card"]["title"])
    assert len(titles) == 9


async def test_htmx_request_gets_only_the_reader_fragment(client: httpx.AsyncClient) -> None:
    r = await client.get("/read/jax-tpu/execute", headers={"HX-Request": "true"})
    assert r.status_code == 200
    assert r.text.lstrip().startswith('<div id="reader"')
    assert "<html" not in r.text
    assert "Hardware facts" not in r.text
    # htmx restoring history asks for the whole page.
    full = await client.get(
        "/read/jax-tpu/execute",
        headers={"HX-Request": "true", "HX-History-Restore-Request": "true"},
    )
    assert full.text.startswith("<!doctype html>")


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("/read/jax-cpu/compile", "jax-cpu"),
        ("/read/jax-gpu/link", "link"),
        ("/read/tpu/run", "tpu"),
        ("/embed/cuda/nothing", "nothing"),
    ],
)
async def test_unknown_views_get_a_404_listing_valid_ones(
    client: httpx.AsyncClient, url: str, named: str
) -> None:
    r = await client.get(url)
    assert r.status_code == 404
    assert named in r.text
    for p in READER_PATHS:
        assert f"<code>{p.value}</code>" in r.text
    for s in READER_STAGES:
        assert f"<code>{s.value}</code>" in r.text
    j = await client.get(url + ".json")
    assert j.status_code == 404
    assert j.json()["valid_paths"] == [p.value for p in READER_PATHS]


async def test_guide_has_every_section_and_the_hardware_panel(client: httpx.AsyncClient) -> None:
    content = load_content()
    r = await client.get("/guide")
    assert r.status_code == 200
    ids = [s.id for s in content.guide.sections]
    assert len(ids) == 12
    for sid in ids:
        assert f'<section id="{sid}"' in r.text
    for card in content.cards.values():
        assert card.guide_section in ids
    # Pallas between XLA's kernels and the FFI, with JAX's own Pallas documents as sources.
    assert ids.index("pallas") == ids.index("portability-ffi") - 1
    pallas = r.text[r.text.index('<section id="pallas"') :]
    pallas = pallas[: pallas.index("</section>")]
    assert "https://docs.jax.dev/en/latest/pallas/index.html" in pallas
    assert "tpu_custom_call" in pallas and "shard_map" in pallas
    assert 'id="hardware"' in r.text
    j = await client.get("/guide.json")
    assert [s["id"] for s in j.json()["guide"]["sections"]] == ids


@pytest.mark.parametrize(
    "figure",
    [
        "32 GB",
        "1,638 GB/s",
        "800 GB/s",
        "256",
        "180 GB",
        "7.7 TB/s",
        "1.4 TB",
        "1.8 TB/s",
        "14.4 TB/s",
    ],
)
async def test_hardware_panel_keeps_vendor_labels(client: httpx.AsyncClient, figure: str) -> None:
    html = (await client.get("/read/jax-tpu/scale")).text
    panel = html[html.index('id="hardware"') :]
    assert f'<td class="value">{figure}' in panel
    assert "10^9" in panel and "2^30" in panel


async def test_user_strings_are_escaped_in_404(client: httpx.AsyncClient) -> None:
    r = await client.get("/read/%3Cscript%3Ealert(1)%3C%2Fscript%3E/compile")
    assert r.status_code == 404
    assert "<script>alert" not in r.text


async def test_embed_renders_the_card_without_site_chrome(client: httpx.AsyncClient) -> None:
    r = await client.get("/embed/cuda/execute")
    assert r.status_code == 200
    assert 'class="card"' in r.text
    assert '<header class="site"' not in r.text
    assert "embed.js" in r.text
    assert "run-panel" not in r.text


async def test_reader_page_offers_oembed_discovery(client: httpx.AsyncClient) -> None:
    html = (await client.get("/read/cuda/compile")).text
    assert 'type="application/json+oembed"' in html
    # Absolute, from the request's origin, when no public base URL is configured.
    assert 'href="http://testserver/oembed?url=http://testserver/read/cuda/compile"' in html
    assert 'src="http://testserver/embed/cuda/compile"' in html
    assert 'src="http://testserver/static/embed-host.js?v=' in html


async def test_the_snippet_names_the_origin_it_was_asked_on(client: httpx.AsyncClient) -> None:
    other = await client.get("/read/cuda/compile", headers={"Host": "docs.internal:8443"})
    assert 'src="http://docs.internal:8443/embed/cuda/compile"' in other.text
    # A Host header that is not a plain host[:port] never reaches the page.
    odd = await client.get("/read/cuda/compile", headers={"Host": 'evilhost"><b>'})
    assert odd.status_code == 200 and "evilhost" not in odd.text


async def test_the_embed_footer_mentions_no_selector_and_queues_nothing(
    client: httpx.AsyncClient,
) -> None:
    html = (await client.get("/embed/jax-tpu/scale")).text
    credit = html[html.index('class="embed-credit"') :]
    assert "choosing a path or a stage only changes" not in credit
    assert "<form" not in html and "hx-post" not in html and "/runs" not in html


async def test_public_base_url_is_used_for_discovery(settings: Settings) -> None:
    from app.main import create_app

    app = create_app(settings.model_copy(update={"PUBLIC_BASE_URL": "https://docs.example.org"}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as c:
        html = (await c.get("/read/cuda/compile")).text
    assert "/oembed?url=https://docs.example.org/read/cuda/compile" in html
    assert 'src="https://docs.example.org/embed/cuda/compile"' in html


@pytest.mark.parametrize("stage", ["compile", "execute", "scale"])
async def test_cuda_pages_use_cuda_words_for_their_stage(
    client: httpx.AsyncClient, stage: str
) -> None:
    cuda = (await client.get(f"/read/cuda/{stage}")).text
    assert "Are we retracing" not in cuda and "Trace, lower and compile" not in cuda
    assert "traces, lowers, compiles" not in cuda  # the run panel's words too
    twin = (await client.get(f"/read/cuda/{stage}.json")).json()
    words = load_content().stages[StageId(stage)].by_path[PathId.CUDA]
    assert twin["stage"]["heading"] == words.heading
    jax = (await client.get("/read/jax-gpu/compile")).text
    assert "Are we retracing" in jax


async def test_every_jax_card_shows_where_a_pallas_kernel_enters(
    client: httpx.AsyncClient,
) -> None:
    """The second example: where the kernel enters at this stage, its code, its claims and
    a "Compile this for real" form that queues the Pallas job (kernel=pallas)."""
    content = load_content()
    for (path, stage), card in content.cards.items():
        page = (await client.get(f"/read/{path.value}/{stage.value}")).text
        if card.pallas is None:
            assert 'id="card-compile-pallas"' not in page
            continue
        assert "Where a Pallas kernel enters:" in page
        form = page[page.index('id="card-compile-pallas"') :]
        form = form[: form.index("</form>")]
        assert 'name="param.kernel" value="pallas"' in form
        assert f'name="target" value="{card.pallas.job.target}"' in form
    stages = {s.value: c.pallas.enters for (p, s), c in content.cards.items() if c.pallas}
    assert "custom call" in stages["compile"] and "shard_map" in stages["scale"]


def test_a_run_of_the_pallas_example_is_matched_to_it_not_to_the_xla_one() -> None:
    from app.reader.card_jobs import card_for_job

    content = load_content()
    card = content.cards[(PathId.JAX_TPU, StageId.EXECUTE)]
    assert card.job is not None and card.pallas is not None
    for job in (card.job, card.pallas.job):
        found = card_for_job(content, {**job.body(), "params": dict(job.params)})
        assert found is not None and found[1] is job
