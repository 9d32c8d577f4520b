"""The scale stage: meshes, shardings, collectives, placement analysis, scaling series
and multi-process worker groups.

Submodules import jax where they need it; this package's own import stays light, so
`workers.workloads` and `workers.run.engine` can depend on its parts without cycles.
"""
