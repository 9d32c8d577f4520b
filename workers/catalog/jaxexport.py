"""The server's door to an uploaded artifact and the files that go with it, all read in
pure Python (NumPy only where an .npz must be opened): the artifact's header with its
argument and result names (`workers.export.header`), input rules (`workers.export.rules`)
and references, whole or sampled (`workers.export.samples`), and the Python lines sent
with an artifact (`workers.export.sources`). The server reaches the worker's side only
through `workers.catalog` and `workers.protocol`; this module is that door for uploads."""

from __future__ import annotations

from workers.export.dims import DimError, dims_problem
from workers.export.header import (
    DTYPES,
    ITEMSIZE,
    ArtifactError,
    Aval,
    ExportHeader,
    read_header,
)
from workers.export.rules import (
    ArgumentSpec,
    InputRuleError,
    InputsError,
    given_arguments,
    resolve_drawn,
    resolve_rules,
)
from workers.export.samples import INDICES, Member, ReferenceError, check_ranges, plan
from workers.export.sources import (
    MAX_SOURCES_BYTES,
    SOURCES_MEDIA_TYPE,
    SentFile,
    SentSources,
    SourcesError,
    boundary_frame,
    parse_sources,
)

__all__ = [
    "DTYPES",
    "INDICES",
    "ITEMSIZE",
    "MAX_SOURCES_BYTES",
    "SOURCES_MEDIA_TYPE",
    "ArgumentSpec",
    "ArtifactError",
    "Aval",
    "DimError",
    "ExportHeader",
    "InputRuleError",
    "InputsError",
    "Member",
    "ReferenceError",
    "SentFile",
    "SentSources",
    "SourcesError",
    "boundary_frame",
    "check_ranges",
    "dims_problem",
    "given_arguments",
    "parse_sources",
    "plan",
    "read_header",
    "resolve_drawn",
    "resolve_rules",
]
