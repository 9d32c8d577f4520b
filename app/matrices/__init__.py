"""Workload matrices: one submission expanded over rows (shapes or parameter values) and
columns (paths), run as workers are free, shown as one table that fills in live."""
