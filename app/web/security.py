"""Response headers that keep pages safe: a strict CSP and framing only where allowed.

Only `/embed/` routes may be framed, by the origins the FRAME_ANCESTORS setting names;
every other response allows framing by the site itself alone.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

EMBED_PREFIX = "/embed/"

_BASE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors "
)


def is_embed(path: str) -> bool:
    return path.startswith(EMBED_PREFIX)


def security_headers(path: str, frame_ancestors: str) -> list[tuple[bytes, bytes]]:
    """The security headers for a response to `path`."""
    embed = is_embed(path)
    ancestors = frame_ancestors if embed else "'self'"
    headers = [
        (b"content-security-policy", (_BASE_CSP + ancestors).encode()),
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
