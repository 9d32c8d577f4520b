"""`boundary worker --server URL [--token T]`: attach this machine's devices to a server
(URL may name a unix socket, `unix:PATH`: `workers.export.server_address`).

`app.cli` dispatches the `worker` subcommand to `worker_command`. The token defaults to
BOUNDARY_WORKER_TOKEN; capabilities are detected by the runner, never assumed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from workers.agent.agent import PARENT_ENV, Agent, AgentConfig
from workers.agent.memory import MemoryPolicy
from workers.agent.runner import DEFAULT_MAX_VIRTUAL_DEVICES, die_with_parent
from workers.catalog.job_limit import job_limit
from workers.compiler.jaxenv import apply_jax_environment
from workers.export.server_address import EXAMPLES, server_option
from workers.files import FILES_DIR_ENV, FILES_MAX_ENV
from workers.protocol.sizes import env_bytes

TOKEN_ENV = "BOUNDARY_WORKER_TOKEN"
CACHE_DIR_ENV = "BOUNDARY_CACHE_DIR"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boundary worker",
        description="Run jobs from a Boundary server on this machine's devices.",
    )
    parser.add_argument(
        "--server", required=True, type=server_option, help=f"the server, e.g. {EXAMPLES}"
    )
    parser.add_argument("--token", help=f"the worker token (default: ${TOKEN_ENV})")
    parser.add_argument("--name", help="a name shown in the worker list")
    parser.add_argument(
        "--max-virtual-devices",
        type=int,
        default=DEFAULT_MAX_VIRTUAL_DEVICES,
        help="on a CPU host, the most virtual devices a jax-cpu job may span (default %(default)s)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    return parser


def agent_config(args: argparse.Namespace, env: Mapping[str, str]) -> AgentConfig:
    """The worker's configuration from its options and environment; ValueError naming
    what is missing or unreadable (a size such as "2GiB" stops the worker, not ignored)."""
    token = args.token or env.get(TOKEN_ENV)
    if not token:
        raise ValueError(f"give --token or set {TOKEN_ENV}")
    max_job_bytes = job_limit(env)
    env_bytes(env, FILES_MAX_ENV)  # read again by each job's file cache
    cache_dir, files_dir = env.get(CACHE_DIR_ENV), env.get(FILES_DIR_ENV)
    return AgentConfig(
        server=args.server,
        token=token,
        name=args.name,
        max_virtual_devices=max(0, args.max_virtual_devices),
        cache_dir=Path(cache_dir).expanduser() if cache_dir else None,
        files_dir=Path(files_dir).expanduser() if files_dir else None,  # before cache_dir's
        max_job_bytes=max_job_bytes,
        memory=MemoryPolicy.from_env(env, max_job_bytes),
    )


def worker_command(argv: list[str]) -> int:
    """Run the worker until SIGTERM or Ctrl-C; the exit status."""
    args = build_parser().parse_args(argv)
    apply_jax_environment()  # inherited by every runner this worker starts
    if os.environ.get(PARENT_ENV):
        # SIGUSR2, not SIGTERM: Linux sends it whenever the thread that started us exits,
        # so the agent checks that the parent really died before it stops (Agent.parent_gone).
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # until the agent handles it
        die_with_parent(PARENT_ENV, signal.SIGUSR2)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s worker %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        # httpx logs every request at INFO: a worker's lease polls and heartbeats would
        # fill `serve`'s log. Its warnings and errors still show.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        config = agent_config(args, os.environ)
    except ValueError as exc:
        print(f"boundary worker: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(Agent(config).run())


if __name__ == "__main__":
    sys.exit(worker_command(sys.argv[1:]))
