"""A job's compiler options as each of its compiles takes them.

Every compile of a job gets its options: the timed one, and the untimed second compiles
(the GPU dump that gives PTX and the fusion report, the pass-pipeline capture, a scaling
series' points, a shape sweep's sizes), or what those show would belong to another
program. JAX keys its in-memory and persistent compilation caches on the options, so an
option never meets a program compiled without it.
"""

from __future__ import annotations

from collections.abc import Mapping

from workers.protocol import JobSpec
from workers.protocol.compiler_options import OptionValue

CompileOptions = dict[str, OptionValue | str]
"""What `lowered.compile(compiler_options=...)` takes."""


def compile_options(
    job: JobSpec | Mapping[str, OptionValue], extra: Mapping[str, str] | None = None
) -> CompileOptions | None:
    """The job's options with `extra` (a dump folder) added, or None when there are none:
    None, not {}, keeps JAX's own caching of a plain compile on the `Lowered`."""
    own = job.compiler_options if isinstance(job, JobSpec) else job
    merged: CompileOptions = {**own, **(extra or {})}
    return merged or None
