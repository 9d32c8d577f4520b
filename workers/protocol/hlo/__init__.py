"""The one reader of HLO text, for both sides (the server's IR pages and diff, the
worker's summaries, memory report and source tags). Pure text, no jax.

    module = read_hlo(text, cut=False)       # HloSyntaxError names a line that does not parse
    module.computations, module.entry, module.by_name, module.parameters(), module.cut
    ins = module.by_name["fusion.3"]         # a frozen Instruction
    ins.opcode, ins.shape, ins.operands, ins.attribute("kind"), ins.metadata.op_name,
    ins.backend_config, ins.called, ins.fusion_kind, ins.custom_call_target
    ins.source.stack                         # every Python frame, innermost first
    ins.source.user, ins.source.library      # the user's own frame; the library's inside it
    ins.parameter_number, ins.parameter_path # an entry parameter's number and pytree path

`syntax` holds the expressions that split a line (only this package uses them) and
`with_metadata`, the one writer of an instruction's metadata (`workers.compiler.source_tags`),
`shapes` the bytes and element counts of a shape, `frames` the stack-frame tables (and
`StackTable`, their one writer, for an uploaded program's HLO).
"""

from workers.protocol.hlo.frames import (
    SOURCE_TABLES,
    Frame,
    Source,
    StackTable,
    library_file,
    source_of,
)
from workers.protocol.hlo.instruction import Computation, Instruction, Metadata
from workers.protocol.hlo.module import HloModule, HloSyntaxError, read_hlo
from workers.protocol.hlo.packed import At, Packed
from workers.protocol.hlo.shapes import (
    element_counts,
    layout_of,
    payload_shape,
    shape_bytes,
    top_level_parts,
    without_layout,
)
from workers.protocol.hlo.syntax import (
    IOTA_GROUPS,
    MESH_AXIS,
    MESH_GROUPS,
    attribute_spans,
    instruction_heads,
    quoted,
    unnamed,
    with_metadata,
    without_metadata,
)

__all__ = [
    "IOTA_GROUPS",
    "MESH_AXIS",
    "MESH_GROUPS",
    "SOURCE_TABLES",
    "At",
    "Computation",
    "Frame",
    "HloModule",
    "HloSyntaxError",
    "Instruction",
    "Metadata",
    "Packed",
    "Source",
    "StackTable",
    "attribute_spans",
    "element_counts",
    "instruction_heads",
    "layout_of",
    "library_file",
    "payload_shape",
    "quoted",
    "read_hlo",
    "shape_bytes",
    "source_of",
    "top_level_parts",
    "unnamed",
    "with_metadata",
    "without_layout",
    "without_metadata",
]
