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
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, ValidationError

from app.queue.validation import JobRefused, validate_job
from workers.catalog.target_rules import COMPILE_ONLY_CAP
from workers.protocol import PathId, StageId

CONTENT_DIR = Path(__file__).resolve().parent.parent / "content"

READER_PATHS: tuple[PathId, ...] = (PathId.JAX_GPU, PathId.JAX_TPU, PathId.CUDA)
"""The paths the reader explains (jax-cpu is the bench's host reference, not a reader path)."""

READER_STAGES: tuple[StageId, ...] = (StageId.COMPILE, StageId.EXECUTE, StageId.SCALE)


class ContentError(Exception):
    """A content file is wrong. The message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Model):
    """A public primary source the cards link to."""

    id: str
    title: str
    publisher: str
    url: HttpUrl


class Step(_Model):
    """One box in a path's pipeline diagram."""

    id: str
    label: str
    detail: str
    stage: StageId


class DiagramBoundary(_Model):
    """A bracket drawn over consecutive steps: the boundary a stage asks you to inspect."""

    stage: StageId
    label: str
    first: str = Field(description="Id of the first step enclosed.")
    last: str = Field(description="Id of the last step enclosed.")


class PathInfo(_Model):
    """A programming model on a kind of hardware, with its pipeline."""

    id: PathId
    label: str
    short: str
    hardware: str
    programming_model: str
    steps: list[Step] = Field(min_length=3)
    boundaries: list[DiagramBoundary]


class StageWords(_Model):
    """A stage's heading and question in one path's own terms."""

    heading: str
    question: str


class StageInfo(_Model):
    """A stage of the pipeline and the question it asks (JAX's words unless a path has its
    own: CUDA C++ compiles ahead of time and never traces)."""

    id: StageId
    label: str
    heading: str
    question: str
    by_path: dict[PathId, StageWords] = Field(default_factory=dict)

    def on(self, path: PathId) -> StageInfo:
        """This stage as `path` words it."""
        words = self.by_path.get(path)
        if words is None:
            return self
        return self.model_copy(update={"heading": words.heading, "question": words.question})


class Code(_Model):
    language: Literal["python", "cuda", "bash"]
    text: str = Field(min_length=1)


class CardClaim(_Model):
    """Something the card says the compiler produces, as a pattern its output must match."""

    says: str = Field(description="The claim in the card's words, shown beside the check.")
    artifact: Literal["hlo", "stablehlo", "jaxpr", "ptx"] = "hlo"
    pattern: str = Field(min_length=1, description="A regular expression over the artifact.")
    absent: bool = Field(default=False, description="True when the card says it is NOT there.")


class CardJob(_Model):
    """The catalog job that is the card's code example, compiled for the card's target."""

    workload: str
    path: PathId
    target: str
    params: dict[str, int | float | str | bool] = Field(default_factory=dict)
    claims: list[CardClaim] = Field(min_length=1)

    def body(self) -> dict[str, Any]:
        """The job as POST /api/v1/jobs takes it: compile only (there is no hardware)."""
        return {
            "workload": self.workload,
            "path": self.path.value,
            "target": self.target,
            "params": dict(self.params),
            "stages": [StageId.COMPILE.value],
        }


class Card(_Model):
    """The explanation of one path at one stage."""

    path: PathId
    stage: StageId
    title: str
    summary: str
    example_note: str
    programming_model: str
    execution_path: str
    boundary: str
    question: str
    code: Code
    assumptions: list[str] = Field(min_length=1)
    inspect_next: list[str] = Field(min_length=1)
    sources: list[str] = Field(min_length=1, description="Ids from sources.toml.")
    guide_section: str = Field(description="Id of a section in guide.toml.")
    job: CardJob | None = Field(
        default=None, description="The catalog job matching the example (JAX cards have one)."
    )


class GuideSection(_Model):
    """One topic of the full explanation."""

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    title: str
    lede: str
    paragraphs: list[str] = Field(min_length=1)
    code: Code | None = None
    sources: list[str] = Field(default_factory=list)


class Guide(_Model):
    title: str
    intro: str
    sections: list[GuideSection] = Field(min_length=1)


class HardwareFact(_Model):
    """A vendor figure, kept exactly as the vendor labels it."""

    label: str
    value: str = Field(description="As printed by the vendor, e.g. '1,638 GB/s'.")
    scope: str = Field(description="Per chip, per GPU, per platform ...")
    note: str | None = None
    source: str


class HardwareGroup(_Model):
    id: str
    title: str
    system: str
    facts: list[HardwareFact] = Field(min_length=1)


class Hardware(_Model):
    intro: str
    units_note: str
    groups: list[HardwareGroup] = Field(min_length=1)


class Site(_Model):
    """Words around the reader: headline, the no-side-effects line, footer."""

    headline: str
    lede: str
    no_side_effects: str
    embed_credit: str
    """The embed's footer: the embed has no selectors, so it must not mention any."""
    default_path: PathId
    default_stage: StageId


class Content(_Model):
    """Everything the reader shows, checked for consistency."""

    site: Site
    paths: dict[PathId, PathInfo]
    stages: dict[StageId, StageInfo]
    cards: dict[tuple[PathId, StageId], Card]
    guide: Guide
    hardware: Hardware
    sources: dict[str, Source]
    version: str = Field(description="A hash of every file: changes when any text changes.")

    def card(self, path: PathId, stage: StageId) -> Card:
        return self.cards[(path, stage)]

    def section(self, section_id: str) -> GuideSection:
        return next(s for s in self.guide.sections if s.id == section_id)


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
    """A card's job must be one the API would accept, on the card's own path."""
    if card.job is None:
        if card.path in CARD_JOB_PATHS:
            raise ContentError(f"{card_file}: field job: a {card.path.value} card names its job")
        return
    if card.job.path != card.path:
        raise ContentError(
            f"{card_file}: field job.path: {card.job.path.value}, the card is {card.path.value}"
        )
    for i, claim in enumerate(card.job.claims):
        try:
            re.compile(claim.pattern)
        except re.error as exc:
            raise ContentError(f"{card_file}: field job.claims[{i}].pattern: {exc}") from None
    try:  # the same checks as a job submitted to the API, stages and samples included
        validate_job(card.job.body(), COMPILE_ONLY_CAP)
    except JobRefused as exc:
        field, message = exc.problems[0]
        field = field or "body"
        said = message if message.startswith(field) else f"{field}: {message}"
        raise ContentError(f"{card_file}: field job.{said}") from None


def load_content(directory: Path = CONTENT_DIR) -> Content:
    """Read and check every content file under `directory`."""
    digest = hashlib.sha256()
    files = sorted(directory.rglob("*.toml"))
    for f in files:
        digest.update(f.relative_to(directory).as_posix().encode())
        digest.update(f.read_bytes())

    site_file = directory / "site.toml"
    site = _parse(Site, _read(site_file), site_file)

    sources_file = directory / "sources.toml"
    raw_sources = _read(sources_file).get("source", [])
    sources: dict[str, Source] = {}
    for i, raw in enumerate(raw_sources):
        src = _parse(Source, raw, sources_file, f"source[{i}]")
        if src.id in sources:
            raise ContentError(f"{sources_file}: field source[{i}].id: duplicate id {src.id!r}")
        sources[src.id] = src

    def check_sources(ids: list[str], path: Path, field: str) -> None:
        for j, sid in enumerate(ids):
            if sid not in sources:
                raise ContentError(
                    f"{path}: field {field}[{j}]: unknown source {sid!r} "
                    f"(known: {', '.join(sorted(sources))})"
                )

    paths_file = directory / "paths.toml"
    paths: dict[PathId, PathInfo] = {}
    for i, raw in enumerate(_read(paths_file).get("path", [])):
        info = _parse(PathInfo, raw, paths_file, f"path[{i}]")
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
        paths[info.id] = info
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

    stages_file = directory / "stages.toml"
    stages: dict[StageId, StageInfo] = {}
    for i, raw in enumerate(_read(stages_file).get("stage", [])):
        stage = _parse(StageInfo, raw, stages_file, f"stage[{i}]")
        stages[stage.id] = stage
    for sid in READER_STAGES:
        if sid not in stages:
            raise ContentError(f"{stages_file}: field stage: no entry for {sid.value!r}")

    guide_file = directory / "guide.toml"
    guide = _parse(Guide, _read(guide_file), guide_file)
    section_ids = [s.id for s in guide.sections]
    if len(set(section_ids)) != len(section_ids):
        raise ContentError(f"{guide_file}: field sections: duplicate section id")
    for i, section in enumerate(guide.sections):
        check_sources(section.sources, guide_file, f"sections[{i}].sources")

    hardware_file = directory / "hardware.toml"
    hardware = _parse(Hardware, _read(hardware_file), hardware_file)
    for i, group in enumerate(hardware.groups):
        for j, fact in enumerate(group.facts):
            check_sources([fact.source], hardware_file, f"groups[{i}].facts[{j}].source")

    cards: dict[tuple[PathId, StageId], Card] = {}
    for pid in READER_PATHS:
        for sid in READER_STAGES:
            card_file = directory / "cards" / f"{pid.value}.{sid.value}.toml"
            card = _parse(Card, _read(card_file), card_file)
            if (card.path, card.stage) != (pid, sid):
                raise ContentError(
                    f"{card_file}: field path/stage: says {card.path.value}/{card.stage.value}, "
                    f"the file name says {pid.value}/{sid.value}"
                )
            if card.guide_section not in section_ids:
                raise ContentError(
                    f"{card_file}: field guide_section: no section {card.guide_section!r} "
                    f"in guide.toml (known: {', '.join(section_ids)})"
                )
            check_sources(card.sources, card_file, "sources")
            _check_job(card, card_file)
            cards[(pid, sid)] = card

    return Content(
        site=site,
        paths=paths,
        stages=stages,
        cards=cards,
        guide=guide,
        hardware=hardware,
        sources=sources,
        version=digest.hexdigest()[:16],
    )
