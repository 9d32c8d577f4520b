"""What the compiler is given and gives back, and the process it runs in: the environment
every JAX process starts with (`jaxenv`), typed doors into jax (`jaxtyped`), the devices
and run environment (`environment`), cache policies (`compile_cache`), the pass pipeline
dump (`pipeline`), the traced function's source (`source`) and what XLA chose, read from
optimized HLO (`hlo_summary`).
"""
