"""Response headers that keep pages safe: a strict CSP and framing only where allowed.

Only `/embed/` routes may be framed, by the origins the FRAME_ANCESTORS setting names;
every other response allows framing by the site itself alone. The vendored trace viewer's
own files (speedscope, under VIEWER_PREFIX) get the one loosening it needs, and no other
path does.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

EMBED_PREFIX = "/embed/"

_BASE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors "
)


VIEWER_PREFIX = "/static/vendor/speedscope/"
"""The vendored trace timeline viewer (scripts/vendor-speedscope)."""

EMPTY_STYLE_HASH = "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
"""The CSP hash of empty text. speedscope's styling library adds one empty <style>
element and fills it through the CSSOM (`insertRule`), which CSP does not govern."""

VIEWER_CSP = _BASE_CSP.replace("script-src 'self'", "script-src 'self' 'wasm-unsafe-eval'").replace(
    "style-src 'self'", f"style-src 'self' {EMPTY_STYLE_HASH}"
)
"""The viewer's policy: it also compiles a small WebAssembly name demangler carried in its
own script. Still no inline script or style text, no eval, no other origin."""


def is_embed(path: str) -> bool:
    return path.startswith(EMBED_PREFIX)


def security_headers(path: str, frame_ancestors: str) -> list[tuple[bytes, bytes]]:
    """The security headers for a response to `path`."""
    embed = is_embed(path)
    ancestors = frame_ancestors if embed else "'self'"
    policy = VIEWER_CSP if path.startswith(VIEWER_PREFIX) else _BASE_CSP
    headers = [
        (b"content-security-policy", (policy + ancestors).encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"strict-origin-when-cross-origin"),
    ]
    if not embed:
        headers.append((b"x-frame-options", b"SAMEORIGIN"))
    return headers


class SecurityHeaders:
    """ASGI middleware adding `security_headers` to every response that lacks a CSP."""

    def __init__(self, app: ASGIApp, frame_ancestors: str) -> None:
        self.app = app
        self.frame_ancestors = frame_ancestors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = security_headers(scope["path"], self.frame_ancestors)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k == b"content-security-policy" for k, _ in headers):
                    headers.extend(extra)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
