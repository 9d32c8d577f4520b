"""The `boundary` command: serve | worker | run | fit | export | export-fn | mcp.

Each subcommand imports what it needs only when it runs, so `boundary serve` never loads
JAX into the server process and `boundary run` never loads the web stack.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

    from app.local_workers import LocalWorkers
    from app.settings import Settings
    from app.state import AppState


def _serve_arguments(argv: list[str]) -> argparse.Namespace:
    """`boundary serve`'s options; a usage error (exit 2) for a wrong one."""
    parser = argparse.ArgumentParser(prog="boundary serve", description="Start the server.")
    parser.add_argument("--host", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="the TCP port (default 8000)")
    parser.add_argument(
        "--uds",
        type=Path,
        metavar="PATH",
        help="listen on this unix socket instead of a TCP port (clients: --server unix:PATH)",
    )
    parser.add_argument(
        "--uds-mode",
        metavar="MODE",
        help="the socket's permissions, in octal (default 600: its owner only; 660: its group too)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="local workers on JAX's CPU backend (default 1; 0 for none)",
    )
    args = parser.parse_args(argv)
    if args.workers < 0:
        parser.error("--workers: must be 0 or more")
    _check_listening(parser, args)
    return args


def _check_listening(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Where the server listens: host and port (their defaults filled in), or a unix
    socket's absolute path with its mode as a number; a usage error for a mix."""
    from app.web.unix_socket import DEFAULT_MODE, parse_mode

    if args.uds is None:
        if args.uds_mode is not None:
            parser.error("--uds-mode: give it with --uds PATH")
        args.host = "127.0.0.1" if args.host is None else args.host
        args.port = 8000 if args.port is None else args.port
        return
    if args.host is not None or args.port is not None:
        parser.error(
            "--uds: the server listens on the socket instead of a TCP port: "
            "give --uds or --host/--port, not both"
        )
    args.uds = args.uds.expanduser().absolute()
    try:
        args.uds_mode = DEFAULT_MODE if args.uds_mode is None else parse_mode(args.uds_mode)
    except ValueError as exc:
        parser.error(f"--uds-mode: {exc}")


def _open_files_refusal(wanted: int) -> str | None:
    """Why the server cannot take `wanted` connections at once (after raising the limit
    on open files as far as it goes); None when it can."""
    descriptors = _raise_open_files()
    if wanted <= descriptors - SPARE_DESCRIPTORS:
        return None
    return (
        f"boundary serve: BOUNDARY_MAX_CONNECTIONS={wanted:,} needs "
        f"more open files than this process may have ({descriptors:,}, less "
        f"{SPARE_DESCRIPTORS} for the store, workers and logs): lower it, or raise "
        "the limit (ulimit -n)"
    )


def _uvicorn_config(app: ASGIApp, host: str, port: int, settings: Settings) -> uvicorn.Config:
    """How uvicorn serves `app`: through the guarded protocol, without its own proxy
    headers, and without waiting out the workers' long-polls to shut down. (Over a unix
    socket, `host` and `port` are unused: the socket is handed to the server.)"""
    import uvicorn

    from app.web.clients import Proxies
    from app.web.connections import ConnectionLimits, guarded_protocol

    limits = ConnectionLimits(
        settings.HEADER_TIMEOUT_S,
        settings.MAX_CONNECTIONS,
        max_per_client=settings.MAX_CONNECTIONS_PER_CLIENT,
        write_timeout_s=settings.WRITE_TIMEOUT_S,
        trusted=Proxies.from_settings(settings),
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # uvicorn's httptools protocol with a header deadline, a connection cap and a
        # lingering close (app.web.connections; docs/design/hardening.md).
        http=guarded_protocol(limits),
        access_log=settings.ACCESS_LOG,
        log_level="info",
        # Workers hold long-polls open; do not wait the whole poll to shut down.
        timeout_graceful_shutdown=5,
        # Admission reads X-Forwarded-For itself, from trusted proxies only (app.web.clients).
        proxy_headers=False,
    )


def _draining_server(
    config: uvicorn.Config,
    workers: LocalWorkers | None,
    states: list[AppState],
    started: Callable[[], None],
) -> uvicorn.Server:
    """A uvicorn server that calls `started` once it accepts connections and, on the first
    SIGTERM or Ctrl-C, stops leasing (through the dispatcher of the app's state in
    `states`) and lets the local `workers` finish and report their jobs before it closes;
    a second signal, or no local workers, closes it now."""
    import uvicorn

    class Server(uvicorn.Server):
        loop: asyncio.AbstractEventLoop | None = None
        draining = False

        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            self.loop = asyncio.get_running_loop()
            await super().serve(sockets)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            started()

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.draining or workers is None or self.loop is None:
                super().handle_exit(sig, frame)
                return
            self.draining = True
            dispatcher = states[0].dispatcher if states else None
            if dispatcher is not None:
                self.loop.call_soon_threadsafe(dispatcher.stop_leasing)
            workers.drain(then=lambda: setattr(self, "should_exit", True))

    return Server(config)


def _worker_env(settings: Settings) -> dict[str, str]:
    """The local workers' environment: this process's, with each size both read written as
    the plain number of bytes the server parsed (it takes `2_147_483_648`; a worker, whole
    digits only)."""
    env = dict(os.environ)
    for name in ("MAX_JOB_BYTES", "FILES_MAX_BYTES", "PIPELINE_MAX_BYTES"):
        if f"BOUNDARY_{name}" in env:
            env[f"BOUNDARY_{name}"] = str(getattr(settings, name))
    return env


def _serve(argv: list[str]) -> int:
    args = _serve_arguments(argv)
    # Local workers share a token with this server; make one when the operator set none.
    token = os.environ.get("BOUNDARY_WORKER_TOKEN") or secrets.token_urlsafe(24)
    os.environ["BOUNDARY_WORKER_TOKEN"] = token

    from app.settings import get_settings

    settings = get_settings()  # read once per process: only after the token is set
    refusal = _open_files_refusal(settings.MAX_CONNECTIONS)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return 2
    if args.uds is None:
        return _run_server(args, settings, None)
    from app.web.unix_socket import SocketRefused, listen_unix

    try:  # before any thread starts: the socket is bound under a umask of its own
        listener, stale = listen_unix(args.uds, args.uds_mode)
    except SocketRefused as exc:
        print(f"boundary serve: {exc}", file=sys.stderr)
        return 2
    if stale:
        print(f"boundary serve: removed {args.uds}: no server answered on it", file=sys.stderr)
    try:
        return _run_server(args, settings, listener.sock)
    finally:
        listener.remove()


def _run_server(args: argparse.Namespace, settings: Settings, sock: socket.socket | None) -> int:
    """Serve until stopped, on `sock` (a unix socket) or on args' host and port, with
    args.workers local workers started once the server accepts connections."""
    from app.local_workers import LocalWorkers
    from app.main import create_app

    failures: list[BaseException] = []
    states: list[AppState] = []
    workers = LocalWorkers(
        _local_server(args), args.workers, _worker_env(settings), settings.WORKER_GRACE_S
    )

    def build_failed(exc: BaseException) -> None:
        failures.append(exc)
        server.should_exit = True  # stop listening: every API request would fail

    def started() -> None:
        if args.uds is not None:
            logging.getLogger("uvicorn.error").info(
                "Boundary serves on the unix socket %s (mode %03o): clients give "
                "--server unix:%s, nginx proxy_pass http://unix:%s:",
                args.uds, args.uds_mode, args.uds, args.uds,
            )  # fmt: skip
        if args.workers:
            workers.start()

    # Building the app here (not through uvicorn's factory) loads the content once and
    # lets a content error stop the command with its own message.
    app = create_app(settings, defer=True, on_build_failure=build_failed, on_state=states.append)
    # (On a unix socket host and port are None: the socket is handed to uvicorn instead.)
    config = _uvicorn_config(app, args.host or "127.0.0.1", args.port or 0, settings)
    server = _draining_server(config, workers if args.workers else None, states, started)
    try:
        server.run(sockets=None if sock is None else [sock])
    finally:
        workers.stop()
    if failures:
        print(f"boundary serve: the server failed to start: {failures[0]!r}", file=sys.stderr)
        return 1
    return 0


def _local_server(args: argparse.Namespace) -> str:
    """The `--server` the local workers are given: the socket, or this host and port."""
    if args.uds is not None:
        return f"unix:{args.uds}"
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    return f"http://[{host}]:{args.port}" if ":" in host else f"http://{host}:{args.port}"


SPARE_DESCRIPTORS = 256
"""Open files kept for what is not a client connection: the store, workers, logs."""


def _raise_open_files() -> int:
    """Raise this process's soft limit on open files to its hard limit; the limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def _export(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="boundary export", description="Write the reader and guide as static HTML."
    )
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    from app.reader.static_site import export_site
    from app.settings import get_settings

    written = export_site(args.directory, get_settings())
    print(f"wrote {len(written)} files to {args.directory}", file=sys.stderr)
    print((args.directory / "index.html").resolve().as_uri())
    return 0


def _worker(argv: list[str]) -> int:
    from workers.cli.worker import worker_command

    return worker_command(argv)


def _run(argv: list[str]) -> int:
    from workers.cli.run import run_command

    return run_command(argv)


def _fit(argv: list[str]) -> int:
    from workers.cli.fit import fit_command

    return fit_command(argv)


def _export_fn(argv: list[str]) -> int:
    import importlib.util

    if importlib.util.find_spec("jax") is None:  # the base install alone
        print(
            "boundary export-fn: jax is not installed here: install Boundary with its export "
            "extra where your model runs (pip install '/path/to/boundary[export]'), or your "
            "model's own jax",
            file=sys.stderr,
        )
        return 2
    from workers.cli.export_fn import export_command

    return export_command(argv)


def _mcp(argv: list[str]) -> int:
    from app.mcp.stdio import mcp_command

    return mcp_command(argv)


COMMANDS = {
    "serve": _serve,
    "worker": _worker,
    "run": _run,
    "export": _export,
    "export-fn": _export_fn,
    "fit": _fit,
    "mcp": _mcp,
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(
            "usage: boundary {serve|worker|run|fit|export|export-fn|mcp} [options]  "
            "(boundary CMD --help)",
            file=sys.stderr,
        )
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    if argv[0] == "export-fn":
        # Runs in a model's own environment, which has none of the server's dependencies
        # (pydantic among them): hand over before importing any of them.
        raise SystemExit(_export_fn(argv[1:]))
    from pydantic import ValidationError

    from app.reader.content import ContentError

    try:
        code = COMMANDS[argv[0]](argv[1:])
    except ContentError as exc:
        print(f"boundary: content error: {exc}", file=sys.stderr)
        code = 3
    except ValidationError as exc:  # a setting from the environment is wrong
        for error in exc.errors(include_url=False, include_input=False):
            name = "BOUNDARY_" + ".".join(str(p) for p in error["loc"])
            print(f"boundary: {name}: {error['msg']}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
