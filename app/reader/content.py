"""The reader's content: data files under app/content/, validated at start-up.

A documentation team edits the TOML files; nothing here holds prose. Any mistake (a
missing field, an unknown id, a link to a guide section that does not exist) stops the
server with a ContentError naming the file and the field.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.queue.validation import JobRefused, validate_job
from app.reader.models import (
    Card,
    CardJob,
    Content,
    Guide,
    Hardware,
    PathInfo,
    Site,
    Source,
    StageInfo,
)
from workers.catalog.target_rules import COMPILE_ONLY_CAP
from workers.protocol import PathId, StageId

CONTENT_DIR = Path(__file__).resolve().parent.parent / "content"

READER_PATHS: tuple[PathId, ...] = (PathId.JAX_GPU, PathId.JAX_TPU, PathId.CUDA)
"""The paths the reader explains (jax-cpu is the bench's host reference, not a reader path)."""

READER_STAGES: tuple[StageId, ...] = (StageId.COMPILE, StageId.EXECUTE, StageId.SCALE)


class ContentError(Exception):
    """A content file is wrong. The message names the file and the field."""


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ContentError(f"{path}: missing file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ContentError(f"{path}: not valid TOML: {exc}") from None


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], data: Any, path: Path, prefix: str = "") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in (*([prefix] if prefix else []), *err["loc"]))
        raise ContentError(f"{path}: field {where or '(top)'}: {err['msg']}") from None


CARD_JOB_PATHS: tuple[PathId, ...] = (PathId.JAX_GPU, PathId.JAX_TPU)
"""Cards on these paths must name the catalog job their example is."""


def _check_job(card: Card, card_file: Path) -> None:
    """A card's jobs must be ones the API would accept, on the card's own path; a JAX card
    has both examples, the second one a Pallas kernel."""
    if card.job is None or card.pallas is None:
        if card.path in CARD_JOB_PATHS:
            missing, what = ("job", "job") if card.job is None else ("pallas", "Pallas example")
            raise ContentError(
                f"{card_file}: field {missing}: a {card.path.value} card names its {what}"
            )
        return
    for field, job in (("job", card.job), ("pallas.job", card.pallas.job)):
        _check_one(field, job, card, card_file)
    if card.pallas.job.params.get("kernel") != "pallas":
        raise ContentError(f"{card_file}: field pallas.job.params.kernel: must be pallas")


def _check_one(field: str, job: CardJob, card: Card, card_file: Path) -> None:
    if job.path != card.path:
        raise ContentError(
            f"{card_file}: field {field}.path: {job.path.value}, the card is {card.path.value}"
        )
    for i, claim in enumerate(job.claims):
        try:
            re.compile(claim.pattern)
        except re.error as exc:
            raise ContentError(f"{card_file}: field {field}.claims[{i}].pattern: {exc}") from None
    try:  # the same checks as a job submitted to the API, stages and samples included
        validate_job(job.body(), COMPILE_ONLY_CAP)
    except JobRefused as exc:
        name, message = exc.problems[0]
        name = name or "body"
        said = message if message.startswith(name) else f"{name}: {message}"
        raise ContentError(f"{card_file}: field {field}.{said}") from None


def _version(directory: Path) -> str:
    """A short digest of every content file's name and bytes: it changes when any does."""
    digest = hashlib.sha256()
    for f in sorted(directory.rglob("*.toml")):
        digest.update(f.relative_to(directory).as_posix().encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def _load_sources(sources_file: Path) -> dict[str, Source]:
    """The sources by id, each id once."""
    sources: dict[str, Source] = {}
    for i, raw in enumerate(_read(sources_file).get("source", [])):
        src = _parse(Source, raw, sources_file, f"source[{i}]")
        if src.id in sources:
            raise ContentError(f"{sources_file}: field source[{i}].id: duplicate id {src.id!r}")
        sources[src.id] = src
    return sources


def _check_sources(sources: dict[str, Source], ids: list[str], path: Path, field: str) -> None:
    """Every id in `ids` (the list at `field` of the file at `path`) names a known source."""
    for j, sid in enumerate(ids):
        if sid not in sources:
            raise ContentError(
                f"{path}: field {field}[{j}]: unknown source {sid!r} "
                f"(known: {', '.join(sorted(sources))})"
            )


def _check_boundaries(info: PathInfo, i: int, paths_file: Path) -> None:
    """Each boundary of the `i`th path starts and ends at steps of that path, in order."""
    step_ids = [s.id for s in info.steps]
    for j, b in enumerate(info.boundaries):
        for end in ("first", "last"):
            if getattr(b, end) not in step_ids:
                raise ContentError(
                    f"{paths_file}: field path[{i}].boundaries[{j}].{end}: "
                    f"unknown step {getattr(b, end)!r}"
                )
        if step_ids.index(b.first) > step_ids.index(b.last):
            raise ContentError(
                f"{paths_file}: field path[{i}].boundaries[{j}]: first comes after last"
            )


def _check_reader_paths(paths: dict[PathId, PathInfo], paths_file: Path) -> None:
    """Every path the reader explains is there, with a boundary for each of its stages."""
    for pid in READER_PATHS:
        if pid not in paths:
            raise ContentError(f"{paths_file}: field path: no entry for {pid.value!r}")
        staged = {b.stage for b in paths[pid].boundaries}
        for sid in READER_STAGES:
            if sid not in staged:
                raise ContentError(
                    f"{paths_file}: field path[{pid.value}].boundaries: "
                    f"none for stage {sid.value!r}"
                )


def _load_paths(paths_file: Path) -> dict[PathId, PathInfo]:
    """The paths by id, their boundaries checked, every reader path and stage covered."""
    paths: dict[PathId, PathInfo] = {}
    for i, raw in enumerate(_read(paths_file).get("path", [])):
        info = _parse(PathInfo, raw, paths_file, f"path[{i}]")
        _check_boundaries(info, i, paths_file)
        paths[info.id] = info
    _check_reader_paths(paths, paths_file)
    return paths


def _load_stages(stages_file: Path) -> dict[StageId, StageInfo]:
    """The stages by id, every reader stage among them."""
    stages: dict[StageId, StageInfo] = {}
    for i, raw in enumerate(_read(stages_file).get("stage", [])):
        stage = _parse(StageInfo, raw, stages_file, f"stage[{i}]")
        stages[stage.id] = stage
    for sid in READER_STAGES:
        if sid not in stages:
            raise ContentError(f"{stages_file}: field stage: no entry for {sid.value!r}")
    return stages


def _load_guide(guide_file: Path, sources: dict[str, Source]) -> Guide:
    """The guide, its section ids distinct and its sources known."""
    guide = _parse(Guide, _read(guide_file), guide_file)
    section_ids = [s.id for s in guide.sections]
    if len(set(section_ids)) != len(section_ids):
        raise ContentError(f"{guide_file}: field sections: duplicate section id")
    for i, section in enumerate(guide.sections):
        _check_sources(sources, section.sources, guide_file, f"sections[{i}].sources")
    return guide


def _load_hardware(hardware_file: Path, sources: dict[str, Source]) -> Hardware:
    """The hardware facts, each one's source known."""
    hardware = _parse(Hardware, _read(hardware_file), hardware_file)
    for i, group in enumerate(hardware.groups):
        for j, fact in enumerate(group.facts):
            _check_sources(sources, [fact.source], hardware_file, f"groups[{i}].facts[{j}].source")
    return hardware


def _load_card(
    card_file: Path, place: tuple[PathId, StageId], sources: dict[str, Source], guide: Guide
) -> Card:
    """The card for `place` (a path and a stage) from `card_file`, which must say it is for
    that place, point at a guide section and sources that exist, and hold jobs the API
    would accept."""
    pid, sid = place
    card = _parse(Card, _read(card_file), card_file)
    if (card.path, card.stage) != place:
        raise ContentError(
            f"{card_file}: field path/stage: says {card.path.value}/{card.stage.value}, "
            f"the file name says {pid.value}/{sid.value}"
        )
    section_ids = [s.id for s in guide.sections]
    if card.guide_section not in section_ids:
        raise ContentError(
            f"{card_file}: field guide_section: no section {card.guide_section!r} "
            f"in guide.toml (known: {', '.join(section_ids)})"
        )
    _check_sources(sources, card.sources, card_file, "sources")
    _check_job(card, card_file)
    return card


def _load_cards(
    cards_dir: Path, sources: dict[str, Source], guide: Guide
) -> dict[tuple[PathId, StageId], Card]:
    """One card for each reader path and stage, from `<path>.<stage>.toml`."""
    return {
        (pid, sid): _load_card(
            cards_dir / f"{pid.value}.{sid.value}.toml", (pid, sid), sources, guide
        )
        for pid in READER_PATHS
        for sid in READER_STAGES
    }


_LOADED: dict[tuple[Path, str], Content] = {}
KEEP_LOADED = 8


def load_content(directory: Path = CONTENT_DIR) -> Content:
    """Read and check every content file under `directory`, in the order each needs the
    others (sources before the guide, hardware and cards that cite them).

    What it returns follows from the files' names and bytes alone (their digest, `version`)
    and is never changed after, so a process that builds many apps from the same files (the
    tests build hundreds) parses them once and every app shares the result; any edit
    changes the digest and is read. A result is kept only when the digest is the same after
    the parse as before it (a file edited during the parse is not kept under either)."""
    version = _version(directory)
    key = (directory, version)
    kept = _LOADED.get(key)
    if kept is not None:
        return kept
    content = _checked(directory, version)
    if _version(directory) == version:
        if len(_LOADED) >= KEEP_LOADED:
            _LOADED.pop(next(iter(_LOADED)), None)  # the oldest
        _LOADED[key] = content
    return content


def _checked(directory: Path, version: str) -> Content:
    site = _parse(Site, _read(directory / "site.toml"), directory / "site.toml")
    sources = _load_sources(directory / "sources.toml")
    paths = _load_paths(directory / "paths.toml")
    stages = _load_stages(directory / "stages.toml")
    guide = _load_guide(directory / "guide.toml", sources)
    hardware = _load_hardware(directory / "hardware.toml", sources)
    cards = _load_cards(directory / "cards", sources, guide)
    return Content(
        site=site,
        paths=paths,
        stages=stages,
        cards=cards,
        guide=guide,
        hardware=hardware,
        sources=sources,
        version=version,
    )
