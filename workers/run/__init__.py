"""One job through its stages, as one run: `engine.run_job` validates the job and hands it
to the runner for its kind: the JAX path (`program`, then `execute`), a target without
its hardware (`deviceless`), a shape sweep (`sweep`) or the cuda path (`cuda`). What
every runner shares is in `base`; the timed trace and lower in `stages`.

Imports the building blocks (workloads, scale, cuda, xla_targets) and everything below.
"""
