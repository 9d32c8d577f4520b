"""The written rule of every field a worker can post in a run result, and what enforces it.

`RULES` is the table docs/design/result-rules.md reads out, and the code: each row names
its kind and its enforcer, and one mechanism per kind applies the rows of its kind
(`workers.catalog.rule_kinds`). A test walks every field of `RunResult` and fails on one
that no rule covers, and on a table that differs from the manual's; another forges every
row by its kind. A pattern is a field's path (`measurements[].stats.median`) or a path
ending in `*` for every field under it; the longest pattern that matches a field is its
rule. A run's `extra` entries are fields of their own (`extra.cuda`).

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

from workers.catalog import rule_bounds as b
from workers.catalog import rule_checks as c
from workers.catalog import rule_recomputed as r
from workers.catalog.rule_kinds import Bound, Check, Recompute, Server, Text
from workers.catalog.rule_walk import covers

Kind = Literal["checked", "recomputed", "bounded", "text", "server"]
Enforcer = Bound | Check | Recompute | Server | Text


@dataclass(frozen=True)
class Rule:
    pattern: str
    kind: Kind
    rule: str
    by: Enforcer


NOT_NEGATIVE = Bound(b.not_negative)
AT_LEAST_ZERO = Bound(b.at_least_zero)
FLAG = Bound(b.flag)
TEXT = Text()
WORDS = Text(no_rate=True)
STORED = Text(limit=None)
"""Text the server caps where it stores it (an artifact, a pass dump) or that its model
caps (a source file)."""
BY_GATE = Recompute(later="the gate, from the samples of a valid run")
MEMORY_REPORT = Bound(b.memory_report, scope="memory_report")
COMPARED = Recompute(b.memory_report, scope="memory_report")
"""The memory report's own rule works out the figure its peak is compared with, and
withholds figures that disagree: applied as a bound, then again (unchanged) as a recompute."""
CORRECTNESS = Recompute(r.correctness, scope="correctness")
RATES = Recompute(r.rates, scope="rates")
TARGET = Recompute(r.target, scope="target")
SWEEP = Recompute(r.sweep, scope="sweep")
SCALING = Recompute(r.scaling, scope="scaling")
SAMPLES = Check(c.samples)
SUBJECTS = Check(c.subjects)
LEASED = Check(c.leased_job)
SERIES = Check(c.scaling)
ENVIRONMENT = Check(c.environment, status=409)

# One row a line, as the manual's table reads (pyproject lets this module's lines run long).
# fmt: off
RULES: tuple[Rule, ...] = (
    Rule("protocol_version", "checked", "the protocol the worker registered with", Check(c.protocol)),
    Rule("job.*", "checked", "the leased job, field by field", LEASED),
    Rule("params", "checked", "the leased job's parameters after validation and defaults", LEASED),
    Rule("inputs[].*", "bounded", "within the job's bytes and of its dtype, else all withheld; an upload's from its header", Bound(r.inputs, scope="inputs")),
    Rule("inputs[].name", "text", "the argument's name, capped", Text(limit=200)),
    Rule("stage_seconds.*", "bounded", "finite and not negative; warm_up withheld with times", NOT_NEGATIVE),
    Rule("artifacts.*", "text", "the compiler's output, capped in size where stored", STORED),
    Rule("artifacts_cut", "bounded", "names of artifacts the run has, each once", Bound(b.artifacts_cut)),
    Rule("hlo_summary.*", "recomputed", "from the stored optimized HLO text", Recompute(later="the server, from the stored optimized HLO")),
    Rule("cost_analysis.*", "bounded", "the compiler's count: finite and not negative", NOT_NEGATIVE),
    Rule("memory_analysis.*", "bounded", "the compiler's bytes: not negative", NOT_NEGATIVE),
    Rule("memory_analysis.temp_bytes", "bounded", "not negative; none on TPU without the device", Bound(b.analysis_temp)),
    Rule("measurements[].boundary", "checked", "one the job's mode reports", SAMPLES),
    Rule("measurements[].samples_s", "checked", "finite, above 0, at most the job's count", SAMPLES),
    Rule("measurements[].warmup_samples_s", "checked", "as samples; at most the loop's cap", SAMPLES),
    Rule("measurements[].stats.*", "recomputed", "from the samples", BY_GATE),
    Rule("measurements[].calls_per_sample", "recomputed", "K, a sweep's sizes, else 1", Recompute(r.calls_per_sample)),
    Rule("measurements[].warmup_discarded", "recomputed", "the discarded samples counted", BY_GATE),
    Rule("measurements[].stopped_because", "text", "the loop's reason; none that states a rate", WORDS),
    Rule("measurements[].shape", "bounded", "kept only with 10 samples or more", Bound(b.shape)),
    Rule("measurements[].shape_checked", "bounded", "true only with 10 samples or more", Bound(b.shape_checked)),
    Rule("measurements[].note", "text", "the worker's; the server's when withheld; no rate", WORDS),
    Rule("measurements[].subject", "checked", "the job's subjects, one per boundary (422)", SUBJECTS),
    Rule("correctness.tolerance", "recomputed", "the catalog's; several results: the worst's", CORRECTNESS),
    Rule("correctness.passed", "recomputed", "checked, finite error within the tolerance", CORRECTNESS),
    Rule("correctness.error", "bounded", "finite and not negative, else no pass", NOT_NEGATIVE),
    Rule("correctness.worst", "recomputed", "the checked result nearest to failing", CORRECTNESS),
    Rule("correctness.results[].name", "checked", "an upload's results as its header names them (422)", Check(c.result_names)),
    Rule("correctness.results[].tolerance", "recomputed", "the catalog's, by result dtype", CORRECTNESS),
    Rule("correctness.results[].passed", "recomputed", "finite error within its tolerance", CORRECTNESS),
    Rule("correctness.results[].error", "bounded", "finite and not negative, else no pass", NOT_NEGATIVE),
    Rule("correctness.results[].sampled", "bounded", "a count of elements compared", NOT_NEGATIVE),
    Rule("correctness.arithmetic", "recomputed", "a catalog workload's from its precision and path; an upload's one its platform has", CORRECTNESS),
    Rule("correctness.arithmetic_words", "recomputed", "the server's sentence for it", CORRECTNESS),
    Rule("correctness.*", "text", "the reference and the detail, as words; whether it was checked", TEXT),
    Rule("device_time.calls", "recomputed", "the device-time measurement's sample count; none without it", Recompute(r.device_time, scope="device_time")),
    Rule("device_time.ops[].median_s", "bounded", "above 0, at most the longest span, else left out", Bound(b.device_ops, scope="device_time.ops")),
    Rule("device_time.ops[].calls", "bounded", "at most the profiled pass's calls", Bound(b.profiled_calls)),
    Rule("device_time.ops[].kind", "server", "what it does, read from the stored HLO", Server("device_time.ops[].kind")),
    Rule("device_time.ops[].estimated_cycles", "server", "the stored HLO's estimated_cycles", Server("device_time.ops[].estimated_cycles")),
    Rule("device_time.estimated_cycles", "server", "the entry computation's, added up", Server("device_time.estimated_cycles")),
    Rule("device_time.ops[].name", "text", "the instruction's name, capped; none that states a rate", Text(limit=200, no_rate=True)),
    Rule("device_time.*", "text", "the trace's planes, capped; none that states a rate", Text(limit=80, items=16, no_rate=True)),
    Rule("prediction.target", "recomputed", "the chip's own target, from the device kind; the real peak and temporary bytes from the run's memory analysis", Recompute(r.prediction, scope="prediction")),
    Rule("prediction.same_hlo", "bounded", "a yes or no", FLAG),
    Rule("prediction.compiler_version", "text", "the compiler's version, capped", Text(limit=120, no_rate=True)),
    Rule("prediction.refused", "text", "the compiler's refusal, capped", Text(limit=1_000, no_rate=True)),
    Rule("prediction.*", "bounded", "the compilers' own figures: not negative", NOT_NEGATIVE),
    Rule("rates.flops", "recomputed", "catalog formula; an upload: the compiler's, bounded", RATES),
    Rule("rates.bytes", "recomputed", "catalog formula; an upload: the compiler's, bounded", RATES),
    Rule("rates.boundary", "checked", "the job's main boundary or none (422); then the server's", SAMPLES),
    Rule("rates.subject", "recomputed", "from the job: cuda's kernel, a sweep's none policy", RATES),
    Rule("rates.calls", "recomputed", "from the job: a sweep's sizes, else 1", RATES),
    Rule("rates.source", "recomputed", "analytic, or the compiler's count for an upload", RATES),
    Rule("rates.flops_per_s", "recomputed", "counts over the median of the samples", BY_GATE),
    Rule("rates.bytes_per_s", "recomputed", "counts over the median of the samples", BY_GATE),
    Rule("environment.platform", "checked", "registered, and the job's path's (409)", ENVIRONMENT),
    Rule("environment.device_kind", "checked", "the worker's registered device kind (409)", ENVIRONMENT),
    Rule("environment.device_count", "checked", "1 or more if it ran, at most registered (409)", ENVIRONMENT),
    Rule("environment.cache", "recomputed", "the job's cache policy", Recompute(r.cache_policy)),
    Rule("environment.cache_events.*", "bounded", "hits only if persistent; none negative", Bound(b.cache_events, scope="environment.cache_events")),
    Rule("environment.*", "text", "versions, flags, host: the worker's words", Text(limit=4_000)),
    Rule("warnings", "text", "the worker's, capped; one that states a rate is dropped", Text(items=64, no_rate=True)),
    Rule("valid", "recomputed", "the worker says so and the server's checks pass", BY_GATE),
    Rule("harness_seconds", "bounded", "finite and not negative; withheld with times", NOT_NEGATIVE),
    Rule("kernel_resources[].*", "bounded", "ptxas's figures: not negative", NOT_NEGATIVE),
    Rule("kernel_resources[].name", "text", "the kernel's name", Text(limit=200)),
    Rule("kernel_resources[].arch", "text", "the architecture compiled for", Text(limit=200)),
    Rule("kernel_resources[].source", "text", "the tool the figures came from", Text(limit=200)),
    Rule("extra", "bounded", "its known entries only", Bound(b.known_entries)),
    Rule("extra.cuda", "checked", "the cuda path's kernel, launches and build, typed (422)", Check(c.cuda_facts)),
    Rule("extra.baselines", "recomputed", "the cuda path's subjects, judged at the catalog's tolerance", Recompute(r.baselines)),
    Rule("extra.comparison", "recomputed", "the cuda path's, from its subjects' samples", Recompute(r.comparison)),
    Rule("extra.warmed", "recomputed", "the job's warm-up calls and what its mode warms", Recompute(r.warmed)),
    Rule("extra.unreported_s", "bounded", "times by name: finite and not negative", Bound(b.unreported)),
    Rule("extra.seed", "bounded", "a whole number, not negative", Bound(b.whole)),
    Rule("extra.sizes_distinct", "bounded", "a whole number, not negative", Bound(b.whole)),
    Rule("extra.compile_only", "bounded", "a yes or no", FLAG),
    Rule("extra.kernel", "bounded", "a Pallas kernel's names as words, block sizes 1 to 65,536", Bound(b.kernel_record)),
    Rule("extra.output_sha256", "text", "a word", Text(only_words=True)),
    Rule("extra.sampled", "text", "a word", Text(only_words=True)),
    Rule("placement.*", "text", "the mesh and shardings the compiler reported", TEXT),
    Rule("placement.memory[].*", "bounded", "the compiler's per-device bytes: not negative", NOT_NEGATIVE),
    Rule("placement.memory[].device", "text", "which device, as reported", TEXT),
    Rule("placement.memory[].source", "text", "where the figures came from", Text(limit=200)),
    Rule("scaling.points[].devices", "checked", "in the job's series, once per mode (422)", SERIES),
    Rule("scaling.points[].samples_s", "checked", "finite, above 0, capped per point", SERIES),
    Rule("scaling.points[].median_s", "recomputed", "from the point's samples", BY_GATE),
    Rule("scaling.points[].correct", "recomputed", "finite error within the point's tolerance", SCALING),
    Rule("scaling.points[].error", "bounded", "finite and not negative, else not correct", NOT_NEGATIVE),
    Rule("scaling.points[].boundary", "checked", "host-sync", SERIES),
    Rule("scaling.boundary", "checked", "host-sync", SERIES),
    Rule("scaling.*", "text", "a scale job's only: shapes and collectives as it ran", TEXT),
    Rule("group.members[].median_s", "recomputed", "process 0's from the samples; others none", BY_GATE),
    Rule("group.members[].error", "bounded", "finite and not negative", NOT_NEGATIVE),
    Rule("group.members[].local_devices", "bounded", "not negative", AT_LEAST_ZERO),
    Rule("group.devices", "checked", "at most the worker's registered devices (409)", ENVIRONMENT),
    Rule("group.agreed", "recomputed", "every process passed with one output digest", BY_GATE),
    Rule("group.*", "text", "the group's members as reported", TEXT),
    Rule("profile.*", "bounded", "the trace, size-checked on inflation; withheld with times", Bound(b.profile, scope="profile")),
    Rule("sweep.sizes", "recomputed", "the job's sizes; a shape-sweep job's only", SWEEP),
    Rule("sweep.policies[].policy", "checked", "the job's policies, each once (422)", Check(c.sweep_policies)),
    Rule("sweep.policies[].padded_sizes", "recomputed", "the catalog's bucketing", SWEEP),
    Rule("sweep.policies[].flops", "recomputed", "the catalog's formula, padding included", SWEEP),
    Rule("sweep.policies[].useful_flops", "recomputed", "the catalog's formula, unpadded", SWEEP),
    Rule("sweep.policies[].padding_waste_pct", "recomputed", "from the two counts above", SWEEP),
    Rule("sweep.policies[].steady_pass_s", "recomputed", "median of the policy's samples", SWEEP),
    Rule("sweep.policies[].steady_call_s", "recomputed", "steady_pass_s per call", SWEEP),
    Rule("sweep.policies[].first_pass_s", "bounded", "finite; never faster than steady", Bound(b.first_pass)),
    Rule("sweep.policies[].traces", "bounded", "between 0 and the number of sizes", Bound(b.traces)),
    Rule("sweep.policies[].compilations", "bounded", "not negative", AT_LEAST_ZERO),
    Rule("sweep.policies[].compile_s", "bounded", "finite and not negative", NOT_NEGATIVE),
    Rule("sweep.policies[].trace_s", "bounded", "finite and not negative", NOT_NEGATIVE),
    Rule("sweep.policies[].lower_s", "bounded", "finite and not negative", NOT_NEGATIVE),
    Rule("sweep.*", "text", "a shape sweep's only: the op and the note", TEXT),
    Rule("source.sha256", "recomputed", "SHA-256 of the text", Recompute(r.source_digest)),
    Rule("source.*", "text", "the workload function's source as the worker ran it", STORED),
    Rule("pipeline.*", "text", "the compiler's pass dump, capped and stored apart", STORED),
    Rule("pipeline.capture_s", "bounded", "finite and not negative", NOT_NEGATIVE),
    Rule("kernel_pipelines{}.*", "text", "each kernel's pass dump, capped and stored apart", STORED),
    Rule("kernel_pipelines{}.capture_s", "bounded", "finite and not negative", NOT_NEGATIVE),
    Rule("hlo_explained[].*", "server", "the server explains the stored HLO itself", Server("hlo_explained")),
    Rule("ceilings.*", "server", "the worker's registered ceilings, rates above 0", Server("ceilings")),
    Rule("target.id", "recomputed", "the job's target", TARGET),
    Rule("target.model", "recomputed", "the job's target", TARGET),
    Rule("target.count", "recomputed", "the job's target", TARGET),
    Rule("target.deviceless", "recomputed", "true exactly when the job ran nothing", TARGET),
    Rule("target.memory.hbm_bytes", "recomputed", "the server's chip table", TARGET),
    Rule("target.memory.hbm_label", "recomputed", "the server's chip table", TARGET),
    Rule("target.memory.source", "recomputed", "the server's chip table", TARGET),
    Rule("target.memory.fraction", "recomputed", "peak + code over the usable bytes", TARGET),
    Rule("target.memory.usable_bytes", "bounded", "TPU: libtpu's reading, above 0 and at most twice the HBM; GPU: the job's usable_fraction of the HBM, JAX's default share without one", Bound(b.usable_bytes)),
    Rule("target.memory.usable_source", "bounded", "the worker's words beside libtpu's reading; GPU: the server's", Bound(b.usable_source)),
    Rule("target.memory.temp_bytes", "bounded", "not negative; none on TPU without the device", Bound(b.target_temp)),
    Rule("target.memory.generated_code_bytes", "bounded", "not reported where XLA:GPU says 0", Bound(b.generated_code)),
    Rule("target.memory.*", "bounded", "the compiler's bytes: not negative", NOT_NEGATIVE),
    Rule("target.kernels[].*", "bounded", "libtpu's schedule counts: not negative", AT_LEAST_ZERO),
    Rule("target.kernels[].non_empty_bundles", "bounded", "not negative, at most the bundles", Bound(b.non_empty_bundles)),
    Rule("target.kernels[].vmem_bytes", "bounded", "not negative", NOT_NEGATIVE),
    Rule("target.kernels[].kernel", "text", "the kernel's instruction name", Text(limit=200)),
    Rule("target.*", "text", "the compiler's name, notes and refusal, as words", Text(items=64)),
    Rule("memory_report.*", "bounded", "≥ 0; curve peaks at peak_step; it adds up to the peak", MEMORY_REPORT),
    Rule("memory_report.peak_bytes", "bounded", "the curve's maximum, beside memory_analysis()'s", MEMORY_REPORT),
    Rule("memory_report.compared_bytes", "recomputed", "from memory_analysis() by the rule", COMPARED),
    Rule("memory_report.compared_rule", "recomputed", "the run's platform's rule", COMPARED),
    Rule("memory_report.difference", "recomputed", "both peaks and why, if > 1% apart", COMPARED),
    Rule("memory_report.withheld", "server", "why the server withheld the figures, if it did", Server("memory_report.withheld")),
    Rule("memory_report.blocks[].name", "text", "a block's name, capped", Text(limit=200)),
    Rule("memory_report.blocks[].why", "text", "what the block is and sets its size, capped", Text(limit=400)),
    Rule("memory_report.blocks[].set_by.instruction", "text", "an HLO instruction's name", Text(limit=200)),
    Rule("memory_report.blocks[].set_by.op_name", "text", "the HLO metadata's op name", Text(limit=400)),
    Rule("memory_report.blocks[].set_by.source", "text", "file:line as the program names it", Text(limit=400)),
    Rule("memory_report.buffers[].kind", "text", "a kind of allocation, by name", TEXT),
    Rule("memory_report.buffers[].instructions", "text", "HLO instruction names, capped", Text(limit=200, items=16)),
    Rule("memory_report.buffers[].shape", "text", "the compiler's shape, capped", Text(limit=400)),
    Rule("memory_report.buffers[].layout", "text", "the compiler's layout, capped", Text(limit=200)),
    Rule("memory_report.buffers[].op_name", "text", "the HLO metadata's op name, capped", Text(limit=400)),
    Rule("memory_report.buffers[].source", "text", "file:line as the program names it", Text(limit=400)),
    Rule("memory_report.buffers[].library", "text", "file:line of the library under it", Text(limit=400)),
    Rule("memory_report.buffers[].parameter_path", "text", "an argument's pytree path", Text(limit=400)),
    Rule("memory_report.buffers[].live_at_peak", "bounded", "counted in the peak's make-up", MEMORY_REPORT),
    Rule("memory_report.source", "text", "the compiler's files it was read from", Text(limit=400)),
    Rule("memory_report.cost", "text", "what the dump cost, in words", Text(limit=400)),
)
# fmt: on


def rule_for(path: str) -> Rule | None:
    """The rule of the field at `path` (e.g. `measurements[].stats.median`): the longest
    pattern that matches it, or None when no rule covers it."""
    best: Rule | None = None
    for rule in RULES:
        if covers(rule.pattern, path) and (best is None or len(rule.pattern) > len(best.pattern)):
            best = rule
    return best
