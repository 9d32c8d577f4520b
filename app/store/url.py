"""BOUNDARY_DB: which database the store opens.

A file path means SQLite (the embedded default); `postgresql://user@host:port/database`
(or `postgres://…`) means PostgreSQL. Anything else that looks like a URL is refused with
a message that says what to write, so that `postgresql:x` or `sqlite:///f` never becomes
a folder of that name in the working directory. `Timeouts` are the bounds on every wait
for a PostgreSQL database (app.store.postgres).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")  # C:\… or C:/… is a Windows path, not a scheme
PG_SCHEMES = ("postgresql", "postgres")


class BadDatabaseSetting(ValueError):
    """BOUNDARY_DB is neither a file path nor a postgresql:// URL."""


@dataclass(frozen=True)
class Database:
    """Where the store lives: a SQLite file or a PostgreSQL URL."""

    kind: Literal["sqlite", "postgresql"]
    target: str
    """The file path, or the URL as given (it may hold a password)."""

    @property
    def shown(self) -> str:
        """The target without a password, for logs and messages."""
        if self.kind == "sqlite":
            return self.target
        parts = urlsplit(self.target)
        if parts.password is None:
            return self.target
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))


def parse_db(value: str) -> Database:
    """The database BOUNDARY_DB names; BadDatabaseSetting for anything else."""
    text = value.strip()
    if not text:
        raise BadDatabaseSetting("it is empty: give a SQLite file path or a postgresql:// URL")
    match = _SCHEME.match(text)
    if match is None or _DRIVE.match(text):
        return Database("sqlite", text)
    scheme = match.group(1).lower()
    if scheme in PG_SCHEMES:
        parts = urlsplit(text)
        if not text[len(scheme) + 1 :].startswith("//") or not parts.hostname:
            raise BadDatabaseSetting(
                f"{_shown(text)!r} is not a PostgreSQL URL: write "
                "postgresql://user@host:port/database"
            )
        if not parts.path.strip("/"):
            raise BadDatabaseSetting(
                f"{_shown(text)!r} names no database: write postgresql://user@host:port/database"
            )
        return Database("postgresql", text)
    if scheme == "sqlite":
        hint = "for SQLite give the file path itself, e.g. var/boundary.sqlite3"
    else:
        hint = "give a SQLite file path, or postgresql://user@host:port/database"
    raise BadDatabaseSetting(
        f"{_shown(text)!r}: the scheme {scheme!r} is not supported; {hint} "
        "(a file path that starts with 'name:' is written ./name:…)"
    )


def _shown(text: str) -> str:
    """`text` with anything that looks like a URL's password hidden."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", text)


@dataclass(frozen=True)
class Timeouts:
    """The bounds on every wait for the database, in seconds."""

    connect_s: float = 5.0
    """Opening a connection, and waiting for a free one in the pool."""
    lock_s: float = 5.0
    """Waiting for a row or advisory lock another replica holds."""
    statement_s: float = 15.0
    """One statement, start to end."""

    def options(self, synchronous_commit: bool) -> str:
        """The session's start-up options (libpq `options`)."""
        idle_tx_ms = int(max(self.statement_s * 4, 60) * 1000)
        parts = [
            "-c search_path=public",
            f"-c statement_timeout={int(self.statement_s * 1000)}",
            f"-c lock_timeout={int(self.lock_s * 1000)}",
            # A replica that hangs inside a transaction must not hold its row locks forever.
            f"-c idle_in_transaction_session_timeout={idle_tx_ms}",
        ]
        if not synchronous_commit:
            parts.append("-c synchronous_commit=off")
        return " ".join(parts)
