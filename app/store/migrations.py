"""Versioned schema: what a database has, and bringing it up to this server's version.

`schema_migrations (version, name, applied_at)` records each version applied, on both
backends. `migrate` runs when the store opens: each pending version in its own
transaction with its row, so a failed migration leaves the previous version whole (DDL
is transactional on both). A database newer than this server is refused and left as it
is; nothing is ever dropped and re-created.

Several replicas may start at once: on PostgreSQL every migration transaction first
takes an advisory lock (before even `CREATE TABLE IF NOT EXISTS`, which races with
itself), then reads the version again, so one replica applies each version and the
others find nothing left to do.

A SQLite file from before `schema_migrations` says where it stands in
`PRAGMA user_version` (the store's earlier mechanism), which the runner records as rows
and keeps writing, so that an older server still refuses a newer file.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.store import ddl
from app.store.dialect import Backend, Tx


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    scripts: dict[str, str]
    """Per dialect; a dialect without one has it folded into a later version's script."""


MIGRATIONS = [
    Migration(1, "jobs, events, runs, artifacts, workers", {"sqlite": ddl.SQLITE_1}),
    Migration(2, "files", {"sqlite": ddl.SQLITE_2}),
    Migration(3, "matrices", {"sqlite": ddl.SQLITE_3}),
    Migration(4, "lease ids, client index, file use times", {"sqlite": ddl.SQLITE_4}),
    Migration(5, "files in chunks", {"sqlite": ddl.SQLITE_5}),
    Migration(
        6,
        "lease start, workers' keys, shared rate, last reap",
        {"sqlite": ddl.SQLITE_6, "postgresql": ddl.POSTGRES_6},
    ),
    Migration(7, "fit searches", {"sqlite": ddl.SQLITE_7, "postgresql": ddl.POSTGRES_7}),
    Migration(8, "turns between clients", {"sqlite": ddl.SQLITE_8, "postgresql": ddl.POSTGRES_8}),
]
SCHEMA_VERSION = MIGRATIONS[-1].version

MIGRATE_LOCK = "boundary:migrate"
_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
    "name text NOT NULL, applied_at double precision NOT NULL)"
)
# The earlier mechanism, SQLite only: read for files from before schema_migrations,
# written so that a server from before it refuses a newer file.
_LEGACY_READ = {"sqlite": "PRAGMA user_version"}
_LEGACY_WRITE = {"sqlite": "PRAGMA user_version = {version}"}


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer server than this one."""


def statements(script: str) -> list[str]:
    """A script's statements, comments dropped."""
    out = []
    for chunk in script.split(";"):
        text = "\n".join(line.split("--")[0] for line in chunk.splitlines()).strip()
        if text:
            out.append(text)
    return out


def _current(tx: Tx, dialect: str) -> int:
    """The database's version, under the migration lock."""
    tx.lock(MIGRATE_LOCK)
    tx.execute(_TABLE)
    version = int(tx.execute("SELECT max(version) FROM schema_migrations")[0][0] or 0)
    legacy = _LEGACY_READ.get(dialect)
    if legacy is not None:
        older = int(tx.execute(legacy)[0][0])
        for m in MIGRATIONS:
            if version < m.version <= older:
                tx.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)",
                    (m.version, f"{m.name} (recorded from PRAGMA user_version)"),
                )
        version = max(version, older)
    return version


def schema_version(backend: Backend) -> int:
    with backend.tx() as tx:
        return _current(tx, backend.dialect.name)


def migrate(backend: Backend, target: int = SCHEMA_VERSION) -> list[int]:
    """Apply every version up to `target` not yet applied; the versions applied here.
    SchemaTooNew for a database newer than this server."""
    dialect = backend.dialect
    applied: list[int] = []
    while True:
        with backend.tx() as tx:
            version = _current(tx, dialect.name)
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"the database schema is version {version}, newer than this server's "
                    f"{SCHEMA_VERSION}: upgrade the server"
                )
            pending = [m for m in MIGRATIONS if version < m.version <= target]
            step = next((m for m in pending if dialect.name in m.scripts), None)
            if step is None:
                if pending:
                    raise ValueError(f"{dialect.name} has no schema at version {target}")
                return applied
            for statement in statements(step.scripts[dialect.name]):
                tx.execute(statement)
            for m in pending:  # a script that folds in earlier versions stands for each
                if m.version > step.version:
                    break
                tx.execute(
                    dialect.sql(
                        "INSERT INTO schema_migrations (version, name, applied_at) "
                        "VALUES (?, ?, {NOW})"
                    ),
                    (m.version, m.name),
                )
                applied.append(m.version)
            legacy = _LEGACY_WRITE.get(dialect.name)
            if legacy is not None:
                tx.execute(legacy.format(version=step.version))
