"""The reader's content as data: every model the TOML files under app/content/ are read
into, validated by pydantic (`app.reader.content` loads and cross-checks them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl

from workers.protocol import PathId, StageId


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
    artifact: Literal[
        "hlo", "stablehlo", "jaxpr", "ptx", "sass", "mosaic", "bundles", "triton", "mosaic_gpu"
    ] = "hlo"
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


class CardExample(_Model):
    """A card's second example: the same stage with the operation written as a Pallas
    kernel, where the kernel enters at that stage, and the catalog job it is."""

    title: str
    enters: str = Field(description="Where a Pallas kernel enters at this stage.")
    code: Code
    job: CardJob


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
    pallas: CardExample | None = Field(
        default=None, description="The example again as a Pallas kernel (JAX cards have one)."
    )

    def examples(self) -> list[CardJob]:
        """Every catalog job the card's examples are, the first example's first."""
        return [j for j in (self.job, self.pallas.job if self.pallas else None) if j is not None]


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
