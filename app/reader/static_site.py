"""`boundary export DIR`: the reader and the guide as static files with relative links.

The output opens from disk (file://) or from any static host: no server, no htmx, no run
panel. It is the same rendering the server serves, linked differently.
"""

from __future__ import annotations

from pathlib import Path

from app.reader.content import load_content
from app.reader.site import render_site
from app.settings import Settings
from app.web.assets import build_assets
from app.web.templating import export_file, export_linker, make_environment


def export_site(directory: Path, settings: Settings) -> list[Path]:
    """Write every reader page, embed, JSON twin, the guide and the assets under `directory`."""
    content = load_content(settings.CONTENT_DIR)
    assets = build_assets()
    written: list[Path] = []
    directory.mkdir(parents=True, exist_ok=True)
    for deferred in render_site(
        content, make_environment(), assets, linker=export_linker, export=True
    ):
        r = deferred.make()
        target = directory / export_file(r.url)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(r.body)
        written.append(target)
    for asset in assets.values():
        if asset.name.startswith("vendor/htmx") or asset.name.startswith("vendor/hx-"):
            continue  # the export has no server to talk to
        target = directory / "static" / asset.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(asset.body)
        written.append(target)
    return written
