"""What `boundary export-fn` needs in a model's own environment, and the reading of an
artifact that every side shares. Never pydantic, FastAPI or libtpu: only the standard
library, NumPy and the model's own jax.

- `flatbuffer` and `header`: a serialized `jax.export.Exported` read in pure Python (its
  platforms, shapes, device count, and argument and result names from its trees), for
  the server, the worker and export-fn alike, with `shardings` (each argument's and
  result's mesh and partition spec, and how the pages say it) and `hlo_sharding` (the
  HLO shardings an older jax wrote instead);
- `sources`: the Python lines an exported program names, which export-fn sends beside
  it, and the server's check of them;
- `rules`: a run's inputs: the arguments given (an inputs file's, an example's) and the
  rest drawn under per-argument rules (`params.input_rules`), the same draws on every
  machine;
- `samples`: references as a sample of (index, value) pairs per result;
- `trees` (jax): a function exported from example arguments of any structure, through
  plain trees named by path.
- `server_address`: the server a `--server` option names (a URL, or a unix socket as
  `unix:PATH`) and the httpx client that reaches it, for export-fn's `--upload` and every
  other command that talks to a server.

The server reaches the jax-free modules only through `workers.catalog` (its one door to
the worker's side, with `workers.protocol`); this package imports nothing else of ours.
"""
