"""Content files are validated at start-up; a mistake names its file and field."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from app.main import create_app
from app.reader.content import CONTENT_DIR, ContentError, load_content
from app.settings import Settings


@pytest.fixture
def content_copy(tmp_path: Path) -> Path:
    target = tmp_path / "content"
    shutil.copytree(CONTENT_DIR, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_shipped_content_is_complete() -> None:
    content = load_content()
    assert len(content.cards) == 9
    assert len(content.guide.sections) == 12
    assert len(content.version) == 16


def test_version_changes_with_any_text(content_copy: Path) -> None:
    before = load_content(content_copy).version
    site = content_copy / "site.toml"
    site.write_text(site.read_text() + "\n# an edit\n")
    assert load_content(content_copy).version != before


def test_an_edit_is_read_though_the_last_parse_is_kept(content_copy: Path) -> None:
    first = load_content(content_copy)
    assert load_content(content_copy) is first  # the same files: parsed once
    edit(content_copy / "site.toml", 'headline = "Follow', 'headline = "Trace')
    edited = load_content(content_copy)
    assert edited.site.headline.startswith("Trace the execution boundary")
    edit(content_copy / "site.toml", 'headline = "Trace', 'headline = "Follow')
    assert load_content(content_copy).site.headline == first.site.headline


def test_templates_are_compiled_again_when_their_source_changes(tmp_path: Path) -> None:
    from jinja2 import Environment, FileSystemLoader

    from app.web.templating import CompiledTemplates

    shared = CompiledTemplates()
    page = tmp_path / "page.html"

    def render() -> str:
        env = Environment(loader=FileSystemLoader(tmp_path), bytecode_cache=shared)
        return env.get_template("page.html").render(name="v6e")

    page.write_text("compiled for {{ name }}")
    assert render() == "compiled for v6e"
    assert render() == "compiled for v6e"  # a second environment, from the shared code
    page.write_text("compiled again for {{ name }}")
    assert render() == "compiled again for v6e"


def _drop_line(field: str) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        f = d / "cards" / "jax-tpu.execute.toml"
        lines = f.read_text().splitlines(keepends=True)
        f.write_text("".join(line for line in lines if not line.startswith(f"{field} =")))

    return change


def _drop_pallas(d: Path) -> None:
    """A JAX card without its Pallas example."""
    f = d / "cards" / "jax-tpu.compile.toml"
    text = f.read_text()
    f.write_text(text[: text.index("\n[pallas]")] + "\n")


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (_drop_line("question"), ["jax-tpu.execute.toml", "question", "Field required"]),
        (
            lambda d: edit(
                d / "cards" / "cuda.scale.toml", 'guide_section = "', 'guide_section = "x'
            ),
            ["cuda.scale.toml", "guide_section"],
        ),
        (
            lambda d: edit(
                d / "cards" / "jax-gpu.compile.toml", 'sources = ["', 'sources = ["nope", "'
            ),
            ["jax-gpu.compile.toml", "sources[0]", "nope"],
        ),
        (
            lambda d: edit(
                d / "cards" / "jax-gpu.scale.toml", 'path = "jax-gpu"', 'path = "jax-gpx"'
            ),
            ["jax-gpu.scale.toml", "path"],
        ),
        (lambda d: (d / "cards" / "cuda.execute.toml").unlink(), ["cuda.execute.toml", "missing"]),
        (
            lambda d: (d / "hardware.toml").write_text(
                (d / "hardware.toml").read_text() + "\nbogus = 1\n"
            ),
            ["hardware.toml", "bogus"],
        ),
        (lambda d: (d / "guide.toml").write_text("title = [unclosed"), ["guide.toml", "TOML"]),
        (_drop_pallas, ["jax-tpu.compile.toml", "pallas"]),
        (
            lambda d: edit(
                d / "cards" / "jax-gpu.execute.toml",
                'pallas_backend = "mosaic-gpu"',
                'pallas_backend = "mosaic-gpu", block_m = 100',
            ),
            ["jax-gpu.execute.toml", "pallas.job.params.block_m", "does not divide m=2048"],
        ),
        (
            lambda d: edit(
                d / "cards" / "jax-tpu.execute.toml",
                'dtype = "bfloat16", kernel = "pallas" }',
                'dtype = "bfloat16", kernel = "xla" }',
            ),
            ["jax-tpu.execute.toml", "pallas.job.params.kernel", "must be pallas"],
        ),
    ],
    ids=[
        "missing-field",
        "broken-section-link",
        "unknown-source",
        "unknown-path",
        "missing-card",
        "unknown-field",
        "bad-toml",
        "jax-card-without-pallas",
        "pallas-blocks-refused",
        "pallas-example-not-pallas",
    ],
)
def test_mistakes_stop_start_up_with_file_and_field(
    content_copy: Path, settings: Settings, change: Callable[[Path], None], names: list[str]
) -> None:
    change(content_copy)
    with pytest.raises(ContentError) as info:
        create_app(settings.model_copy(update={"CONTENT_DIR": content_copy}))
    for name in names:
        assert name in str(info.value)


def test_serve_refuses_to_start_on_bad_content(content_copy: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    _drop_line("title")(content_copy)
    proc = subprocess.run(  # noqa: PLW1510 (the exit code is asserted below)
        [sys.executable, "-m", "app.cli", "serve", "--port", "1", "--workers", "0"],
        env={
            **os.environ,
            "BOUNDARY_CONTENT_DIR": str(content_copy),
            "BOUNDARY_DB": str(tmp_path / "db.sqlite3"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3
    assert "jax-tpu.execute.toml" in proc.stderr and "title" in proc.stderr
