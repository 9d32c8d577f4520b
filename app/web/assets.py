"""Static files, read once into memory and addressed by a content hash."""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from app.settings import REPO_ROOT
from app.web.templating import pygments_css

STATIC_DIR = REPO_ROOT / "static"

_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".html": "text/html; charset=utf-8",
}


@dataclass(frozen=True)
class Asset:
    """A static file's bytes, its type and a short hash of its content."""

    name: str
    body: bytes
    content_type: str
    digest: str

    @property
    def url(self) -> str:
        return f"/static/{self.name}?v={self.digest}"


def load_assets(
    directory: Path = STATIC_DIR, extra: dict[str, bytes] | None = None
) -> dict[str, Asset]:
    """Every file under `directory` (plus generated `extra` files), keyed by relative name."""
    files: dict[str, bytes] = {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }
    files.update(extra or {})
    assets: dict[str, Asset] = {}
    for name, body in files.items():
        suffix = Path(name).suffix
        ctype = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        assets[name] = Asset(name, body, ctype, hashlib.sha256(body).hexdigest()[:12])
    return assets


def build_assets() -> dict[str, Asset]:
    """The site's static files, with app.css followed by the IR highlighting's styles."""
    css = (STATIC_DIR / "app.css").read_bytes() + b"\n" + pygments_css().encode()
    return load_assets(extra={"app.css": css})
