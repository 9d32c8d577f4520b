"""The worker side's commands, each dispatched to by `app.cli`: `boundary run` (`run`,
and `submit` for `--server`), `boundary worker` (`worker`), `boundary export-fn`
(`export_fn`), and how a run is printed (`printout`).

`python -m workers.cli run ...` is `boundary run ...` without the web stack installed.
"""
