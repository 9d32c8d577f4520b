"""The written rule of every field a worker can post in a run result.

`RULES` is the table docs/design/result-rules.md reads out; a test walks every field of
`RunResult` and fails on one that no rule covers, and on a table that differs from this
one. A pattern is a field's path (`measurements[].stats.median`) or a path ending in `*`
for every field under it; the longest pattern that matches a field is its rule.

Kinds:

- `checked`: must be the leased job's, or the registered worker's; otherwise the whole
  result is refused (422, or 409 for the environment), naming the field.
- `recomputed`: the server works it out itself from the job, the catalog's formulas, the
  samples or the compiler's own text; what the worker sent is not read.
- `bounded`: only the worker can know it (a compiler's report, its own clock); kept when
  finite, not negative and consistent with the rest, withheld (None) otherwise.
- `text`: words or compiler output, kept as text (escaped, capped), never read as a figure.
- `server`: the server's alone; whatever a worker sends under this name is dropped.

And every time, count or rate of a run that is not valid, ran nothing, or whose times
are no speed (Pallas interpret mode) is withheld together (`workers.protocol.gate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["checked", "recomputed", "bounded", "text", "server"]


@dataclass(frozen=True)
class Rule:
    pattern: str
    kind: Kind
    rule: str


RULES: tuple[Rule, ...] = (
    Rule("protocol_version", "checked", "the protocol the worker registered with"),
    Rule("job.*", "checked", "the leased job, field by field"),
    Rule("params", "checked", "the leased job's parameters after validation and defaults"),
    Rule("inputs[].*", "recomputed", "an upload's from its header; else within the job's bytes"),
    Rule("stage_seconds.*", "bounded", "finite and not negative; warm_up withheld with times"),
    Rule("artifacts.*", "text", "the compiler's output, capped in size"),
    Rule("artifacts_cut", "bounded", "names of artifacts the run has, each once"),
    Rule("hlo_summary.*", "recomputed", "from the stored optimized HLO text"),
    Rule("cost_analysis.*", "bounded", "the compiler's count: finite and not negative"),
    Rule("memory_analysis.*", "bounded", "not negative; no TPU temp_bytes without the device"),
    Rule("measurements[].boundary", "checked", "one the job's mode reports"),
    Rule("measurements[].samples_s", "checked", "finite, above 0, at most the job's count"),
    Rule("measurements[].warmup_samples_s", "checked", "as samples; at most the loop's cap"),
    Rule("measurements[].stats.*", "recomputed", "from the samples"),
    Rule("measurements[].calls_per_sample", "recomputed", "K, a sweep's sizes, else 1"),
    Rule("measurements[].warmup_discarded", "recomputed", "the discarded samples counted"),
    Rule("measurements[].stopped_because", "text", "the loop's reason; none that states a rate"),
    Rule("measurements[].shape", "bounded", "kept only with 10 samples or more"),
    Rule("measurements[].shape_checked", "bounded", "true only with 10 samples or more"),
    Rule("measurements[].note", "text", "the worker's; the server's when withheld; no rate"),
    Rule("measurements[].subject", "checked", "the job's subjects, one per boundary (422)"),
    Rule("correctness.tolerance", "recomputed", "the catalog's; several results: the worst's"),
    Rule("correctness.passed", "recomputed", "checked, finite error within the tolerance"),
    Rule("correctness.error", "bounded", "finite and not negative, else no pass"),
    Rule("correctness.results[].tolerance", "recomputed", "the catalog's, by result dtype"),
    Rule("correctness.results[].passed", "recomputed", "finite error within its tolerance"),
    Rule("correctness.results[].error", "bounded", "finite and not negative, else no pass"),
    Rule("correctness.results[].sampled", "bounded", "a count of elements compared"),
    Rule(
        "correctness.arithmetic",
        "recomputed",
        "a catalog workload's from its precision and path; an upload's one its platform has",
    ),
    Rule("correctness.arithmetic_words", "recomputed", "the server's sentence for it"),
    Rule("correctness.*", "text", "names, the reference and the detail, as words"),
    Rule("device_time.calls", "recomputed", "the device-time measurement's sample count"),
    Rule("device_time.ops[].median_s", "bounded", "above 0, at most the longest span"),
    Rule("device_time.ops[].calls", "bounded", "at most the profiled pass's calls"),
    Rule("device_time.ops[].kind", "server", "what it does, read from the stored HLO"),
    Rule("device_time.ops[].estimated_cycles", "server", "the stored HLO's estimated_cycles"),
    Rule("device_time.estimated_cycles", "server", "the entry computation's, added up"),
    Rule("device_time.*", "text", "the trace's planes and the instructions' names"),
    Rule("prediction.target", "recomputed", "the chip's own target, from the device kind"),
    Rule("prediction.*", "bounded", "the compilers' own figures: not negative"),
    Rule("rates.flops", "recomputed", "catalog formula; an upload: the compiler's, bounded"),
    Rule("rates.bytes", "recomputed", "catalog formula; an upload: the compiler's, bounded"),
    Rule("rates.boundary", "recomputed", "the job's main boundary, when it executes"),
    Rule("rates.subject", "recomputed", "from the job: cuda's kernel, a sweep's none policy"),
    Rule("rates.calls", "recomputed", "from the job: a sweep's sizes, else 1"),
    Rule("rates.source", "recomputed", "analytic, or the compiler's count for an upload"),
    Rule("rates.flops_per_s", "recomputed", "counts over the median of the samples"),
    Rule("rates.bytes_per_s", "recomputed", "counts over the median of the samples"),
    Rule("environment.platform", "checked", "registered, and the job's path's (409)"),
    Rule("environment.device_kind", "checked", "the worker's registered device kind (409)"),
    Rule("environment.device_count", "checked", "1 or more if it ran, at most registered (409)"),
    Rule("environment.cache", "recomputed", "the job's cache policy"),
    Rule("environment.cache_events.*", "bounded", "hits only if persistent; none negative"),
    Rule("environment.*", "text", "versions, flags, host: the worker's words"),
    Rule("warnings", "text", "the worker's, capped; one that states a rate is dropped"),
    Rule("valid", "recomputed", "the worker says so and the server's checks pass"),
    Rule("harness_seconds", "bounded", "finite and not negative; withheld with times"),
    Rule("kernel_resources[].*", "bounded", "ptxas's figures: not negative"),
    Rule("kernel_resources[].name", "text", "the kernel's name"),
    Rule("kernel_resources[].arch", "text", "the architecture compiled for"),
    Rule("kernel_resources[].source", "text", "the tool the figures came from"),
    Rule("extra", "bounded", "known entries, typed; cuda baselines re-judged"),
    Rule("placement.*", "text", "the mesh and shardings the compiler reported"),
    Rule("placement.memory[].*", "bounded", "the compiler's per-device bytes: not negative"),
    Rule("placement.memory[].source", "text", "where the figures came from"),
    Rule("scaling.points[].devices", "checked", "in the job's series, once per mode (422)"),
    Rule("scaling.points[].samples_s", "checked", "finite, above 0, capped per point"),
    Rule("scaling.points[].median_s", "recomputed", "from the point's samples"),
    Rule("scaling.points[].correct", "recomputed", "finite error within the point's tolerance"),
    Rule("scaling.points[].error", "bounded", "finite and not negative, else not correct"),
    Rule("scaling.points[].boundary", "checked", "host-sync"),
    Rule("scaling.boundary", "checked", "host-sync"),
    Rule("scaling.*", "text", "a scale job's only: shapes and collectives as it ran"),
    Rule("group.members[].median_s", "recomputed", "process 0's from the samples; others none"),
    Rule("group.members[].error", "bounded", "finite and not negative"),
    Rule("group.devices", "checked", "at most the worker's registered devices (409)"),
    Rule("group.agreed", "recomputed", "every process passed with one output digest"),
    Rule("group.*", "text", "the group's members as reported"),
    Rule("profile.*", "bounded", "the trace, size-checked on inflation; withheld with times"),
    Rule("sweep.sizes", "recomputed", "the job's sizes"),
    Rule("sweep.policies[].policy", "checked", "the job's policies, each once (422)"),
    Rule("sweep.policies[].padded_sizes", "recomputed", "the catalog's bucketing"),
    Rule("sweep.policies[].flops", "recomputed", "the catalog's formula, padding included"),
    Rule("sweep.policies[].useful_flops", "recomputed", "the catalog's formula, unpadded"),
    Rule("sweep.policies[].padding_waste_pct", "recomputed", "from the two counts above"),
    Rule("sweep.policies[].steady_pass_s", "recomputed", "median of the policy's samples"),
    Rule("sweep.policies[].steady_call_s", "recomputed", "steady_pass_s per call"),
    Rule("sweep.policies[].first_pass_s", "bounded", "finite; never faster than steady"),
    Rule("sweep.policies[].traces", "bounded", "between 0 and the number of sizes"),
    Rule("sweep.policies[].compilations", "bounded", "not negative"),
    Rule("sweep.policies[].compile_s", "bounded", "finite and not negative"),
    Rule("sweep.policies[].trace_s", "bounded", "finite and not negative"),
    Rule("sweep.policies[].lower_s", "bounded", "finite and not negative"),
    Rule("sweep.*", "text", "a shape sweep's only: the op and the note"),
    Rule("source.sha256", "recomputed", "SHA-256 of the text"),
    Rule("source.*", "text", "the workload function's source as the worker ran it"),
    Rule("pipeline.*", "text", "the compiler's pass dump, capped and stored apart"),
    Rule("pipeline.capture_s", "bounded", "finite and not negative"),
    Rule("kernel_pipelines{}.*", "text", "each kernel's pass dump, capped and stored apart"),
    Rule("kernel_pipelines{}.capture_s", "bounded", "finite and not negative"),
    Rule("hlo_explained[].*", "server", "the server explains the stored HLO itself"),
    Rule("ceilings.*", "server", "the worker's registered ceilings, rates above 0"),
    Rule("target.id", "recomputed", "the job's target"),
    Rule("target.model", "recomputed", "the job's target"),
    Rule("target.count", "recomputed", "the job's target"),
    Rule("target.deviceless", "recomputed", "true exactly when the job ran nothing"),
    Rule("target.memory.hbm_bytes", "recomputed", "the server's chip table"),
    Rule("target.memory.hbm_label", "recomputed", "the server's chip table"),
    Rule("target.memory.source", "recomputed", "the server's chip table"),
    Rule("target.memory.fraction", "recomputed", "peak + code over the usable bytes"),
    Rule(
        "target.memory.usable_bytes",
        "bounded",
        "TPU: libtpu's reading, above 0 and at most twice the HBM; GPU: JAX's default share",
    ),
    Rule("target.memory.usable_source", "text", "where the usable bytes come from"),
    Rule("target.memory.temp_bytes", "bounded", "not negative; none on TPU without the device"),
    Rule("target.memory.generated_code_bytes", "bounded", "not reported where XLA:GPU says 0"),
    Rule("target.memory.*", "bounded", "the compiler's bytes: not negative"),
    Rule("target.kernels[].*", "bounded", "libtpu's schedule counts: not negative"),
    Rule("target.kernels[].kernel", "text", "the kernel's instruction name"),
    Rule("target.*", "text", "the compiler's name, notes and refusal, as words"),
    Rule("memory_report.*", "bounded", "≥ 0; curve peaks at peak_step; it adds up to the peak"),
    Rule("memory_report.peak_bytes", "bounded", "the curve's maximum, beside memory_analysis()'s"),
    Rule("memory_report.compared_bytes", "recomputed", "from memory_analysis() by the rule"),
    Rule("memory_report.compared_rule", "recomputed", "the run's platform's rule"),
    Rule("memory_report.difference", "recomputed", "both peaks and why, if > 1% apart"),
    Rule("memory_report.withheld", "recomputed", "why the figures are withheld, if they are"),
    Rule("memory_report.blocks[].name", "text", "a block's name, capped"),
    Rule("memory_report.blocks[].why", "text", "what the block is and sets its size, capped"),
    Rule("memory_report.blocks[].set_by.instruction", "text", "an HLO instruction's name"),
    Rule("memory_report.blocks[].set_by.op_name", "text", "the HLO metadata's op name"),
    Rule("memory_report.blocks[].set_by.source", "text", "file:line as the program names it"),
    Rule("memory_report.buffers[].kind", "text", "a kind of allocation, by name"),
    Rule("memory_report.buffers[].instructions", "text", "HLO instruction names, capped"),
    Rule("memory_report.buffers[].shape", "text", "the compiler's shape, capped"),
    Rule("memory_report.buffers[].layout", "text", "the compiler's layout, capped"),
    Rule("memory_report.buffers[].op_name", "text", "the HLO metadata's op name, capped"),
    Rule("memory_report.buffers[].source", "text", "file:line as the program names it"),
    Rule("memory_report.buffers[].library", "text", "file:line of the library under it"),
    Rule("memory_report.buffers[].parameter_path", "text", "an argument's pytree path"),
    Rule("memory_report.buffers[].live_at_peak", "bounded", "counted in the peak's make-up"),
    Rule("memory_report.source", "text", "the compiler's files it was read from"),
    Rule("memory_report.cost", "text", "what the dump cost, in words"),
)


def rule_for(path: str) -> Rule | None:
    """The rule of the field at `path` (e.g. `measurements[].stats.median`): the longest
    pattern that matches it, or None when no rule covers it."""
    best: Rule | None = None
    for r in RULES:
        hit = path == r.pattern or (r.pattern.endswith("*") and path.startswith(r.pattern[:-1]))
        if hit and (best is None or len(r.pattern) > len(best.pattern)):
            best = r
    return best
