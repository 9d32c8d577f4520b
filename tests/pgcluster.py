"""A throwaway PostgreSQL cluster for tests and benches.

`running_cluster()` runs initdb in a fresh temporary folder, starts the server on
127.0.0.1 on a free port, creates one database and yields a `Cluster` whose `url` a
store can open; leaving the block stops the server and removes the folder. It never
touches a cluster the machine already has (Debian's 15/main, say).

initdb and postgres refuse to run as root, so as root every server command runs as the
`postgres` user (`runuser -u postgres --`), which owns the folder. The cluster listens on
TCP only (no Unix socket), authenticates with SCRAM and a random password, and by
default turns off fsync (a test cluster is thrown away; `durable=True` keeps it on, for
benches that want a server as an operator would run it).

Without PostgreSQL's server binaries, `PostgresMissing` says how to install them
(INSTALL_HINT).

    with running_cluster() as cluster:
        print(cluster.url, cluster.start_s)
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

INSTALL_HINT = (
    "PostgreSQL's server binaries (initdb, pg_ctl, postgres) were not found. Install "
    "them with `apt-get install postgresql` (Debian/Ubuntu; ./scripts/test does), or point "
    "BOUNDARY_PG_BINDIR at the folder that holds them; BOUNDARY_ALLOW_MISSING=postgresql "
    "skips the tests that need them instead."
)
RUN_AS = "postgres"
USER = "boundary"


class PostgresMissing(RuntimeError):
    """PostgreSQL's server binaries are not installed here."""


def find_bindir() -> Path:
    """The folder holding initdb, pg_ctl and postgres: BOUNDARY_PG_BINDIR when it is set
    (that folder and no other), else `pg_config --bindir` (when it holds initdb:
    libpq-dev's pg_config may point at a folder without the server), else the newest
    /usr/lib/postgresql/*/bin."""
    candidates: list[Path] = []
    if env := os.environ.get("BOUNDARY_PG_BINDIR"):
        candidates.append(Path(env))
    else:
        pg_config = shutil.which("pg_config")
        if pg_config is not None:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=False
            )
            if out.returncode == 0:
                candidates.append(Path(out.stdout.strip()))
        candidates += sorted(
            Path("/usr/lib/postgresql").glob("*/bin"),
            key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
            reverse=True,
        )
    for folder in candidates:
        if all((folder / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    raise PostgresMissing(INSTALL_HINT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_server_user(argv: list[str]) -> list[str]:
    """`argv` run as the postgres user when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("runuser") is None:
        raise PostgresMissing("running as root needs `runuser` (util-linux) to drop to postgres")
    return ["runuser", "-u", RUN_AS, "--", *argv]


def _chown_tree(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, RUN_AS, RUN_AS)


@dataclass
class Cluster:
    """A running throwaway cluster: its URL, folder and how long it took to start."""

    bindir: Path
    root: Path
    port: int
    password: str
    database: str
    start_s: float = 0.0
    """Seconds from initdb to a database accepting connections."""
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "server.log"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        """postgresql://user:password@127.0.0.1:port/database"""
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def admin_url(self) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/postgres"

    def _pg_ctl(self, *args: str, timeout: float = 60) -> None:
        argv = _as_server_user(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), *args]
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {done.stderr.strip()}\n{tail}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._pg_ctl("-w", "-t", "30", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`immediate` is a crash: no checkpoint)."""
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("-w", "-m", mode, "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


def _init(cluster: Cluster, durable: bool, settings: dict[str, str]) -> None:
    pwfile = cluster.root / "pw"
    pwfile.write_text(cluster.password + "\n")
    pwfile.chmod(0o600)
    _chown_tree(pwfile)
    argv = [
        str(cluster.bindir / "initdb"),
        "-D", str(cluster.data),
        "-U", USER,
        f"--pwfile={pwfile}",
        "--auth=scram-sha-256",
        "-E", "UTF8",
        "--locale=C.UTF-8",
        "--no-sync",  # the folder is thrown away: do not wait for its files to reach disk
    ]  # fmt: skip
    done = subprocess.run(
        _as_server_user(argv), capture_output=True, text=True, timeout=120, check=False
    )
    pwfile.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
    conf = {
        "listen_addresses": "'127.0.0.1'",
        "port": str(cluster.port),
        "unix_socket_directories": "''",
        "max_connections": "100",
        "shared_buffers": "64MB",
        **({} if durable else {"fsync": "off", "synchronous_commit": "off",
                                 "full_page_writes": "off"}),
        **settings,
    }  # fmt: skip
    with (cluster.data / "postgresql.conf").open("a") as f:  # keeps the postgres owner
        f.write("\n# set by pgcluster.py\n")
        f.writelines(f"{k} = {v}\n" for k, v in conf.items())


@contextmanager
def running_cluster(
    database: str = "boundary", *, durable: bool = False, settings: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """A fresh cluster on 127.0.0.1 with `database` created; stopped and removed after."""
    bindir = find_bindir()
    root = Path(tempfile.mkdtemp(prefix="boundary-pg-"))
    _chown_tree(root)
    cluster = Cluster(bindir, root, free_port(), secrets.token_urlsafe(18), database)
    try:
        started = time.perf_counter()
        _init(cluster, durable, settings or {})
        cluster.start()
        with psycopg.connect(cluster.admin_url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        cluster.start_s = time.perf_counter() - started
        yield cluster
    finally:
        try:
            cluster.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)


def reset(url: str) -> None:
    """Empty the database at `url`: `public` dropped and made again, and any other schema
    of its own dropped (tens of milliseconds, where CREATE DATABASE takes a second)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
        others = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT IN ('public', "
            "'information_schema') AND nspname NOT LIKE 'pg\\_%'"
        ).fetchall()
        for (schema,) in others:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
