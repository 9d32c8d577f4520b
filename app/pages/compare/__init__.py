"""Comparisons of runs that respect boundaries, and the decision records made from them.

guard: which variables are held fixed and which one is the experiment; stats: ratio of
medians with a bootstrap interval over independent runs; diff: two IR texts side by
side; view: the comparison's context (page, fragment and JSON alike); decision: the
record a team keeps of what it measured and decided.
"""
