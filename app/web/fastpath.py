"""A thin ASGI layer that serves pre-rendered responses before any routing happens.

Reader pages, their fragments and JSON twins, and static files are rendered once per
content version. This layer answers GET and HEAD for them from memory: ETag/304,
gzip or brotli bodies compressed on first use, headers built ahead of time. Everything
else falls through to the FastAPI app. The point is speed: a full FastAPI route costs
several times what this does (see bench/reader_load.py).
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import brotli
from starlette.types import ASGIApp, Receive, Scope, Send

Headers = list[tuple[bytes, bytes]]

VARY = b"Accept-Encoding, HX-Request, HX-Request-Type, HX-History-Restore-Request"
MIN_COMPRESS = 512  # below this, compression costs more than it saves


PAGE_QUALITY = 5
"""Brotli quality for pages. A body is compressed when a client first asks for it, so the
first reader of each page waits: over the home page and what it links (13 bodies, 582
KB), quality 11 makes 98 KB in about 63 ms of CPU per body, quality 5 112 KB in about 1
ms. Pages are revalidated (no-cache), so the larger body is sent once per reader and
version (docs/design/layout.md)."""
ASSET_QUALITY = 11
"""Brotli quality for static files: few, cached a year by every browser (immutable), and
held to the first view's budget; the smallest body is worth its one slow compression."""
KEEP_COMPRESSED = 512
_COMPRESSED: dict[tuple[str, str, int], bytes] = {}
"""Compressed bodies kept for the whole process, by digest, encoding and quality: an app
made again from the same content (the tests make hundreds) does not compress its pages
again. At most KEEP_COMPRESSED, oldest out."""
_COMPRESSED_LOCK = threading.Lock()


def _compressed(body: bytes, digest: str, encoding: str, quality: int) -> bytes:
    key = (digest, encoding, quality)
    with _COMPRESSED_LOCK:
        done = _COMPRESSED.get(key)
    if done is None:
        if encoding == "br":
            done = brotli.compress(body, quality=quality)
        else:
            done = gzip.compress(body, compresslevel=9, mtime=0)
        with _COMPRESSED_LOCK:
            if len(_COMPRESSED) >= KEEP_COMPRESSED:
                _COMPRESSED.pop(next(iter(_COMPRESSED)))  # the oldest
            _COMPRESSED[key] = done
    return done


@dataclass
class Entry:
    """One representation of a resource, with its encodings made on demand."""

    body: bytes
    content_type: str
    extra_headers: Headers
    etag: str = ""
    quality: int = PAGE_QUALITY
    """Brotli quality: PAGE_QUALITY, or ASSET_QUALITY for a static file."""
    _encoded: dict[str, bytes] = field(default_factory=dict)
    _headers: dict[str, Headers] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.etag = hashlib.sha256(self.body).hexdigest()[:20]

    def encoded(self, encoding: str) -> bytes:
        """The body in `encoding` ('br', 'gzip' or '')."""
        body = self._encoded.get(encoding)
        if body is None:
            if encoding:
                body = _compressed(self.body, self.etag, encoding, self.quality)
            else:
                body = self.body
            self._encoded[encoding] = body
        return body

    def headers(self, encoding: str) -> Headers:
        """Response headers for `encoding`, built once."""
        cached = self._headers.get(encoding)
        if cached is None:
            body = self.encoded(encoding)
            suffix = f"-{encoding}" if encoding else ""
            cached = [
                (b"content-type", self.content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"etag", f'"{self.etag}{suffix}"'.encode()),
                (b"vary", VARY),
                *self.extra_headers,
            ]
            if encoding:
                cached.append((b"content-encoding", encoding.encode()))
            self._headers[encoding] = cached
        return cached

    def not_modified_headers(self, encoding: str) -> Headers:
        return [h for h in self.headers(encoding) if h[0] not in (b"content-length",)]


@dataclass
class Resource:
    """What one URL serves: the full page, and optionally the htmx fragment."""

    page: Entry
    fragment: Entry | None = None


def _choose_encoding(accept: bytes, size: int) -> str:
    if size < MIN_COMPRESS or not accept:
        return ""
    if b"br" in accept:
        return "br"
    if b"gzip" in accept:
        return "gzip"
    return ""


def _etag_matches(if_none_match: bytes, etag: str) -> bool:
    for raw in if_none_match.split(b","):
        tag = raw.strip()
        if tag == b"*":
            return True
        if tag.startswith(b"W/"):
            tag = tag[2:]
        tag = tag.strip(b'"')
        for suffix in (b"-br", b"-gzip"):
            if tag.endswith(suffix):
                tag = tag[: -len(suffix)]
        if tag == etag.encode():
            return True
    return False


@dataclass
class PerOrigin:
    """A resource whose rendering names the origin it is served from (the embed snippet's
    absolute URLs, when no public base URL is configured): made once per origin, and only
    the last few origins are kept, so a stream of made-up Host headers costs little."""

    make: Callable[[str], Resource]
    keep: int = 8
    _made: dict[str, Resource] = field(default_factory=dict)

    def for_origin(self, origin: str) -> Resource:
        found = self._made.get(origin)
        if found is None:
            found = self.make(origin)
            if len(self._made) >= self.keep:
                self._made.pop(next(iter(self._made)))
            self._made[origin] = found
        return found


_HOST = re.compile(rb"^(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$")


def request_origin(scope: Scope) -> str:
    """The origin a request was made to, e.g. "http://127.0.0.1:8000".

    The Host header is used only when it is a plain host[:port]: it ends up in page text.
    """
    scheme = "https" if scope.get("scheme") == "https" else "http"
    for name, value in scope["headers"]:
        if name == b"host":
            if _HOST.match(value):
                return f"{scheme}://{value.decode('ascii').lower()}"
            break
    server = scope.get("server")
    if server and server[1] is not None:  # (a unix socket's server is its path, no port)
        host, port = server
        default = 443 if scheme == "https" else 80
        return f"{scheme}://{host}" + ("" if port in (None, default) else f":{port}")
    return f"{scheme}://localhost"


Resources = dict[str, Resource | PerOrigin | Callable[[], Resource]]


class FastPath:
    """Serve `resources` (URL path → Resource) from memory; pass the rest to `app`.

    A resource may be given as a function that makes it: it is called on the URL's first
    request and its result kept, so start-up renders nothing.
    """

    def __init__(self, app: ASGIApp, resources: Resources | None = None) -> None:
        self.app = app
        self.resources: Resources = resources or {}

    def replace(self, resources: Resources) -> None:
        """Swap in a new rendering (a new content version) atomically."""
        self.resources = resources

    def urls(self) -> Iterable[str]:
        return self.resources.keys()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        resource = self.resources.get(scope["path"])
        if resource is None:
            await self.app(scope, receive, send)
            return
        if isinstance(resource, PerOrigin):
            resource = resource.for_origin(request_origin(scope))
        elif not isinstance(resource, Resource):
            resource = self.resources[scope["path"]] = resource()
        accept = inm = b""
        partial = False
        for name, value in scope["headers"]:
            if name == b"accept-encoding":
                accept = value
            elif name == b"if-none-match":
                inm = value
            elif name == b"hx-request":
                partial = partial or value == b"true"
            elif name == b"hx-history-restore-request" or (
                name == b"hx-request-type" and value == b"full"
            ):
                # htmx restoring history or targeting the body wants the whole page.
                partial = False
                break
        entry = resource.fragment if (partial and resource.fragment) else resource.page
        encoding = _choose_encoding(accept, len(entry.body))
        if inm and _etag_matches(inm, entry.etag):
            await send(
                {
                    "type": "http.response.start",
                    "status": 304,
                    "headers": entry.not_modified_headers(encoding),
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": entry.headers(encoding)}
        )
        body = b"" if scope["method"] == "HEAD" else entry.encoded(encoding)
        await send({"type": "http.response.body", "body": body})
