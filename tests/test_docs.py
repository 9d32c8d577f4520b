"""The README is a front door and the manual in docs/ holds together: the README stays
short, the manual has its pages, no internal issue numbers, every relative link and
#anchor resolves (by GitHub's heading slugs, which the repository's own view uses), and
mkdocs.yml lists every page. Pure file reading: no server, no network."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
MARKDOWN = [README, *PAGES]

FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target): the text may wrap onto the next line, but not over a blank line.
LINK = re.compile(r"!?\[(?:[^\]\n]|\n(?!\n))*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# "issue 22", "Issue #22", "issues 3 and 4": internal tracker numbers. An upstream issue is
# cited as owner/repo#N, which this does not match.
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
NAV_ENTRY = re.compile(r"^\s*-\s+[^:\n]+:\s+(\S+\.md)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str


def prose(path: Path) -> str:
    """The file's text with fenced code and inline code blanked out, line breaks kept (so
    a link that wraps over two lines is still one link, and offsets still give lines)."""
    lines = []
    fenced = False
    for text in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(text.lstrip()):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else INLINE_CODE.sub("``", text))
    return "\n".join(lines)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lower-cased, punctuation
    dropped (letters, digits, '_', '-' and spaces stay), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", text)  # code and emphasis markers
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a Markdown file's headings make, repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for text in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(text.lstrip()):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(text)
        if match is None:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def relative_links(path: Path) -> list[Link]:
    text = prose(path)
    links = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto:
        links.append(Link(path, text.count("\n", 0, match.start()) + 1, target))
    return links


def where(link: Link) -> str:
    return f"{link.source.relative_to(ROOT)}:{link.line}: {link.target}"


def test_the_readme_is_a_front_door_of_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move the manual to docs/"
    text = "\n".join(lines)
    # The two set-up commands, exactly.
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[server]' && .venv/bin/boundary serve"
        in text
    )
    assert "\n./scripts/test\n" in text


def test_the_manual_has_its_pages_and_design_notes() -> None:
    pages = [p for p in PAGES if p.parent == DOCS]
    notes = [p for p in PAGES if p.parent == DOCS / "design"]
    assert len(pages) >= 8, [p.name for p in pages]
    assert len(notes) >= 5, [p.name for p in notes]


def test_the_manuals_index_links_every_page_and_the_readme_every_design_note() -> None:
    def linked(index: Path) -> set[Path]:
        return {
            (index.parent / link.target.partition("#")[0]).resolve()
            for link in relative_links(index)
        }

    in_index, in_readme = linked(DOCS / "index.md"), linked(README)
    for page in PAGES:
        if page.name != "index.md":
            assert page.resolve() in in_index, f"docs/index.md does not link {page.name}"
        if page.parent == DOCS / "design":
            assert page.resolve() in in_readme, f"README.md does not link design/{page.name}"


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_issue_numbers(path: Path) -> None:
    text = path.read_text(encoding="utf-8")  # code and all
    found = [
        f"line {text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for match in ISSUE_NUMBER.finditer(text)
    ]
    assert not found, (
        f"{path.relative_to(ROOT)}: internal issue numbers {found} (cite owner/repo#N)"
    )


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    broken = []
    for link in relative_links(path):
        target, _, anchor = link.target.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        if not resolved.exists():
            broken.append(f"{where(link)} (no such file)")
            continue
        if path.is_relative_to(DOCS) and not resolved.is_relative_to(DOCS):
            broken.append(f"{where(link)} (leaves docs/, which the site cannot follow)")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{where(link)} (no heading makes #{anchor})")
    assert not broken, "\n".join(broken)


def test_the_site_lists_every_page_and_only_pages_that_exist() -> None:
    listed = set(NAV_ENTRY.findall((ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    pages = {str(p.relative_to(DOCS)) for p in PAGES}
    assert not pages - listed, f"add to mkdocs.yml's nav: {sorted(pages - listed)}"
    assert not listed - pages, f"mkdocs.yml's nav lists missing pages: {sorted(listed - pages)}"


def test_the_slugs_are_githubs() -> None:
    # What GitHub makes of headings like ours; the link test relies on it.
    assert github_slug("One verdict: what differs") == "one-verdict-what-differs"
    assert github_slug("A Pallas kernel's own passes") == "a-pallas-kernels-own-passes"
    assert github_slug("`boundary run`") == "boundary-run"
    assert github_slug("Admission: who may queue what") == "admission-who-may-queue-what"
    assert github_slug("The scale stage — meshes") == "the-scale-stage--meshes"
    assert github_slug("[Pallas](pallas.md) kernels") == "pallas-kernels"
