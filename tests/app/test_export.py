"""`boundary export` writes a static reader that works from disk."""

from __future__ import annotations

import re
from pathlib import Path

from app.reader.static_site import export_site
from app.settings import Settings


def test_export_writes_a_self_contained_site(tmp_path: Path, settings: Settings) -> None:
    out = tmp_path / "site"
    export_site(out, settings)
    assert (out / "index.html").is_file()
    assert (out / "guide.html").is_file()
    for p in ("jax-gpu", "jax-tpu", "cuda"):
        for s in ("compile", "execute", "scale"):
            assert (out / "read" / p / f"{s}.html").is_file()
            assert (out / "read" / p / f"{s}.json").is_file()
            assert (out / "embed" / p / f"{s}.html").is_file()
    assert (out / "static" / "app.css").is_file()

    for html_file in out.rglob("*.html"):
        html = html_file.read_text()
        # No server: no htmx, no run panel, no absolute site links.
        assert "hx-get" not in html, html_file
        assert "htmx" not in html, html_file
        assert "run-panel" not in html, html_file
        for ref in re.findall(r'(?:href|src)="([^"]+)"', html):
            if ref.startswith(("http://", "https://", "#")):
                continue
            assert not ref.startswith("/"), (html_file, ref)
            target = (html_file.parent / ref.split("#")[0]).resolve()
            assert target.is_file(), (html_file, ref)
            fragment = ref.partition("#")[2]
            if fragment:
                assert f'id="{fragment}"' in target.read_text(), (html_file, ref)
