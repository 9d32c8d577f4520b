"""Content-addressed files in the store: kept once, attached by name, migrated in."""

from __future__ import annotations

import hashlib
from pathlib import Path

from app.store import SCHEMA_VERSION, Store


def test_files_are_kept_once_and_attached_by_name(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
    try:
        assert store.schema_version() == SCHEMA_VERSION >= 2
        data = b"\x00\x01 exported function \xff"
        sha = store.put_file(data, "application/octet-stream")
        assert sha == hashlib.sha256(data).hexdigest()
        assert store.put_file(data, "application/octet-stream") == sha  # no duplicate
        got = store.get_file(sha)
        assert got is not None and got.data == data and got.size == len(data)
        assert store.get_file("0" * 64) is None
        assert store.job_file("nope", "fn") is None
    finally:
        store.close()


def test_a_version_1_database_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    from app.store.schema import MIGRATIONS

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db.execute("COMMIT")
    db.close()
    store = Store.open(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.put_file(b"x", "text/plain")
    finally:
        store.close()
