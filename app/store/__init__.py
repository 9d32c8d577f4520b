"""The job store: jobs, their state changes, runs, full artifact text, workers, files,
matrices, fit searches and admission counts, on one of two backends.

- SQLite (the embedded default, `BOUNDARY_DB` a file path): one file in WAL mode, one
  server (app.store.sqlite).
- PostgreSQL (`BOUNDARY_DB=postgresql://…`): the shared store of several replicas
  (app.store.postgres), with LISTEN/NOTIFY between them (app.store.channel).

The API is synchronous on both: every method is a short transaction or one statement,
called straight from the event loop; on PostgreSQL every wait is bounded (see
app.store.postgres). Each state change is one conditional statement (app.store.jobs), so
it holds with several writers as with one. SQL is written once per concern with the
few tokens that differ (app.store.dialect); a statement that differs as a whole sits in
its concern's module as one entry per dialect.

The schema is versioned (app.store.migrations): opening a store brings the database up
to this server's version, under a lock, and refuses a newer one.
"""

from __future__ import annotations

from pathlib import Path

from app.store.base import DEFAULT_RETAIN_RUNS, StoreBase, now
from app.store.channel import Channel, News
from app.store.dialect import Backend
from app.store.files import Files, StoredFile
from app.store.fits import Fits
from app.store.jobs import Jobs, NewJob
from app.store.limits import Admitting, Limits
from app.store.matrices import Matrices
from app.store.migrations import SCHEMA_VERSION, SchemaTooNew, migrate, schema_version
from app.store.reaping import Expired, Reaping
from app.store.registry import Registry, WorkersFull
from app.store.retention import Pruned, Retention
from app.store.runs import Runs
from app.store.schema import JobRow, NewRun, RunRow, WorkerRow
from app.store.sqlite import SQLiteBackend
from app.store.url import BadDatabaseSetting, Database, Timeouts, parse_db


class StoreUnavailable(RuntimeError):
    """The database could not be opened (unreachable, refused the login, unwritable)."""


__all__ = [
    "SCHEMA_VERSION",
    "Admitting",
    "BadDatabaseSetting",
    "Channel",
    "Database",
    "Expired",
    "JobRow",
    "NewJob",
    "NewRun",
    "News",
    "Pruned",
    "RunRow",
    "SchemaTooNew",
    "Store",
    "StoreBase",
    "StoreUnavailable",
    "StoredFile",
    "Timeouts",
    "WorkerRow",
    "WorkersFull",
    "now",
    "parse_db",
]


class Store(Jobs, Reaping, Registry, Runs, Retention, Files, Matrices, Fits, Limits):
    """Every part's queries over one backend. Create with `Store.open(db)`; close when
    done."""

    @classmethod
    def open(
        cls,
        db: str | Path,
        retain_runs: int = DEFAULT_RETAIN_RUNS,
        *,
        timeouts: Timeouts | None = None,
        pool_size: int = 4,
        synchronous_commit: bool = False,
    ) -> Store:
        """Open the database `db` names (a SQLite path, created if needed, or a
        postgresql:// URL) and bring its schema up to date. BadDatabaseSetting for
        anything else, SchemaTooNew for a database a newer server migrated,
        StoreUnavailable (naming the database, never its password) when it did not open."""
        database = parse_db(str(db))
        backend: Backend
        if database.kind == "sqlite":
            backend = SQLiteBackend(Path(database.target))
        else:
            from app.store.postgres import PostgresBackend  # psycopg only when it is used

            backend = PostgresBackend(
                database.target,
                database.shown,
                timeouts=timeouts,
                pool_size=pool_size,
                synchronous_commit=synchronous_commit,
            )
        try:
            migrate(backend)
        except Exception as error:
            backend.close()  # refused (a newer schema, an unreachable server): leave nothing
            if isinstance(error, SchemaTooNew):
                raise
            raise StoreUnavailable(f"the store at {backend.where} did not open: {error}") from error
        return cls(backend, retain_runs)

    def close(self) -> None:
        self.backend.close()

    def schema_version(self) -> int:
        return schema_version(self.backend)

    def ping(self, timeout_s: float = 2.0) -> bool:
        """True when the database answers a query within `timeout_s`."""
        return self.backend.ping(timeout_s)

    def channel(self) -> Channel:
        """A new end of the news between replicas, over this store's database."""
        return Channel(self.backend, self.origin)
