"""Comparisons of runs that respect boundaries, and the decision records made from them.

request: what the query asks to compare (`Comparison`); guard: which variables are held
fixed and which one is the experiment; stats: ratio of medians with a bootstrap interval
over independent runs; sides: each side's runs, stage times, compiler output and the
runs side B may be picked from; plot: the distributions; view: the comparison's context
(page, fragment and JSON alike); decision: the record a team keeps of what it measured
and decided; hlo_changes and hlo_words: the HLO diff of the two sides' optimized HLO
(app.ir.hlo_diff) as a report, in sentences and in rows. The line-by-line IR diff is
app.ir.diff.
"""
