"""Headers, caching, compression, framing rules and oEmbed."""

from __future__ import annotations

import gzip

import brotli
import httpx
import pytest

from app.settings import Settings

pytestmark = pytest.mark.anyio


def csp(r: httpx.Response) -> str:
    return r.headers["content-security-policy"]


async def test_pages_set_a_strict_csp_and_forbid_framing(client: httpx.AsyncClient) -> None:
    for url in ("/", "/read/jax-gpu/execute", "/guide", "/read/cuda/scale.json", "/healthz"):
        r = await client.get(url)
        assert "frame-ancestors 'self'" in csp(r), url
        assert "script-src 'self'" in csp(r)
        assert "unsafe-inline" not in csp(r)
        assert r.headers["x-frame-options"] == "SAMEORIGIN"
        assert r.headers["x-content-type-options"] == "nosniff"


async def test_only_embed_routes_may_be_framed(client: httpx.AsyncClient) -> None:
    r = await client.get("/embed/jax-tpu/compile")
    assert "frame-ancestors *" in csp(r)
    assert "x-frame-options" not in r.headers


async def test_frame_ancestors_come_from_settings(settings: Settings) -> None:
    from app.main import create_app

    app = create_app(settings.model_copy(update={"FRAME_ANCESTORS": "https://wiki.example.org"}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert "frame-ancestors https://wiki.example.org" in csp(await c.get("/embed/cuda/scale"))
        assert "frame-ancestors 'self'" in csp(await c.get("/read/cuda/scale"))


async def test_etag_and_304_for_get_and_head(client: httpx.AsyncClient) -> None:
    identity = {"Accept-Encoding": "identity"}
    r = await client.get("/read/jax-gpu/scale", headers=identity)
    etag = r.headers["etag"]
    assert r.headers["cache-control"] == "no-cache"
    again = await client.get("/read/jax-gpu/scale", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    head = await client.head("/read/jax-gpu/scale", headers=identity)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["etag"] == etag
    assert int(head.headers["content-length"]) == len(r.content)
    head304 = await client.head("/read/jax-gpu/scale", headers={"If-None-Match": f"W/{etag}"})
    assert head304.status_code == 304
    stale = await client.get("/read/jax-gpu/scale", headers={"If-None-Match": '"nope"'})
    assert stale.status_code == 200


async def test_compression_follows_accept_encoding(client: httpx.AsyncClient) -> None:
    plain = await client.get("/guide", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    # Read raw bytes so httpx does not decode them for us.
    for encoding, decode in (("br", brotli.decompress), ("gzip", gzip.decompress)):
        req = client.build_request("GET", "/guide", headers={"Accept-Encoding": encoding})
        r = await client.send(req, stream=True)
        raw = b"".join([chunk async for chunk in r.aiter_raw()])
        await r.aclose()
        assert r.headers["content-encoding"] == encoding
        assert len(raw) < len(plain.content) / 2
        assert decode(raw) == plain.content
        assert "Accept-Encoding" in r.headers["vary"]
        # The same content, compressed: the ETag still validates.
        again = await client.get(
            "/guide", headers={"Accept-Encoding": encoding, "If-None-Match": r.headers["etag"]}
        )
        assert again.status_code == 304


async def test_static_assets_are_immutable_and_versioned(client: httpx.AsyncClient) -> None:
    html = (await client.get("/")).text
    assert "/static/app.css?v=" in html
    r = await client.get("/static/app.css")
    assert r.status_code == 200
    assert "immutable" in r.headers["cache-control"]
    assert ".hl " in r.text  # syntax-highlighting rules are bundled
    lic = await client.get("/static/vendor/htmx-LICENSE.txt")
    assert "BSD" in lic.text


async def test_first_view_fits_the_budget(client: httpx.AsyncClient) -> None:
    """First view ≤ 40 KB compressed (HTML + CSS + JS); JavaScript ≤ 20 KB compressed."""
    html = (await client.get("/")).text
    import re

    urls = re.findall(r'(?:href|src)="(/static/[^"]+)"', html)
    total = js = 0
    for url in ["/", *urls]:
        req = client.build_request("GET", url.split("?")[0], headers={"Accept-Encoding": "br"})
        r = await client.send(req, stream=True)
        size = len(b"".join([c async for c in r.aiter_raw()]))
        await r.aclose()
        total += size
        if url.endswith(".js") or ".js?" in url:
            js += size
    assert js <= 20 * 1024, js
    assert total <= 40 * 1024, total


async def test_oembed_answers_for_own_urls(client: httpx.AsyncClient) -> None:
    r = await client.get("/oembed", params={"url": "http://testserver/read/jax-tpu/scale"})
    assert r.status_code == 200
    data = r.json()
    assert data["version"] == "1.0"
    assert data["type"] == "rich"
    assert data["provider_name"] == "Boundary"
    assert 'src="http://testserver/embed/jax-tpu/scale"' in data["html"]
    # The host script that sizes the frame comes with it, by an absolute URL.
    assert '<script src="http://testserver/static/embed-host.js?v=' in data["html"]
    assert data["width"] == 720 and data["height"] == 900
    assert data["title"]
    embed = await client.get("/oembed", params={"url": "http://testserver/embed/cuda/compile"})
    assert "/embed/cuda/compile" in embed.json()["html"]


async def test_oembed_respects_size_limits(client: httpx.AsyncClient) -> None:
    r = await client.get(
        "/oembed",
        params={"url": "http://testserver/read/cuda/execute", "maxwidth": 400, "maxheight": 300},
    )
    data = r.json()
    assert (data["width"], data["height"]) == (400, 300)
    assert 'width="400" height="300"' in data["html"]
    big = await client.get(
        "/oembed", params={"url": "/read/cuda/execute", "maxwidth": 5000, "maxheight": 5000}
    )
    assert (big.json()["width"], big.json()["height"]) == (720, 900)
    bad = await client.get("/oembed", params={"url": "/read/cuda/execute", "maxwidth": "wide"})
    assert bad.status_code == 422
    assert "maxwidth" in bad.text
    zero = await client.get("/oembed", params={"url": "/read/cuda/execute", "maxheight": 0})
    assert zero.status_code == 422


@pytest.mark.parametrize(
    "url",
    [
        "https://elsewhere.example.com/read/jax-gpu/compile",
        "http://testserver/read/jax-gpu/nowhere",
        "http://testserver/guide",
        "http://testserver/api/v1/jobs",
    ],
)
async def test_oembed_404s_other_urls(client: httpx.AsyncClient, url: str) -> None:
    assert (await client.get("/oembed", params={"url": url})).status_code == 404


async def test_oembed_accepts_the_configured_public_url(settings: Settings) -> None:
    from app.main import create_app

    app = create_app(settings.model_copy(update={"PUBLIC_BASE_URL": "https://b.example.org/"}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://internal:8000"
    ) as c:
        r = await c.get("/oembed", params={"url": "https://b.example.org/read/cuda/scale"})
        assert r.status_code == 200
        assert 'src="https://b.example.org/embed/cuda/scale"' in r.json()["html"]
        internal = await c.get("/oembed", params={"url": "http://internal:8000/read/cuda/scale"})
        assert internal.status_code == 200
        xml = await c.get("/oembed", params={"url": "/read/cuda/scale", "format": "xml"})
        assert xml.status_code == 501
