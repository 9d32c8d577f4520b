"""Content-addressed files in the store: kept once, in chunks, on both backends; read back
through another replica a chunk at a time; and files in an older SQLite database moved
into chunks when it is upgraded."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

from app.store import SCHEMA_VERSION, Store, ddl
from app.store.files import CHUNK_BYTES
from app.store.migrations import statements


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_files_are_kept_once_in_chunks_and_served_by_another_replica(db: str) -> None:
    a, b = Store.open(db), Store.open(db)
    try:
        data = os.urandom(2 * CHUNK_BYTES + 12345)
        sha = a.put_file_stream(pieces(data, 64 * 1024), "application/octet-stream")
        assert sha == hashlib.sha256(data).hexdigest()
        info = b.file_info(sha)
        assert info is not None and info.size == len(data)
        chunks = list(b.file_chunks(info))
        assert [len(c) for c in chunks] == [CHUNK_BYTES, CHUNK_BYTES, 12345]
        assert b"".join(chunks) == data
        # The same bytes again, through the other replica: stored once.
        assert b.put_file(data, "application/octet-stream") == sha
        assert a._read("SELECT count(*) FROM file_chunks")[0][0] == 3
        assert a.files_bytes() == len(data)
        small = b"\x00\x01 exported function \xff"
        got = a.get_file(b.put_file(small, "application/octet-stream"))
        assert got is not None and got.data == small and got.size == len(small)
        assert a.get_file("0" * 64) is None and a.job_file("nope", "fn") is None
        empty = a.get_file(a.put_file(b"", "text/plain"))
        assert empty is not None and empty.data == b""
    finally:
        a.close()
        b.close()


def test_a_file_used_after_retention_planned_its_eviction_stays(db: str) -> None:
    a, b = Store.open(db), Store.open(db)
    try:
        sha = a.put_file(b"x" * 100, "application/octet-stream")
        (used,) = a._read("SELECT used_at FROM files")[0]
        b.touch_files([sha])  # another replica's job named it after A's plan
        with a._tx() as tx:
            assert not a._delete_file(tx, sha, float(used))
        assert a.get_file(sha) is not None
        (used,) = a._read("SELECT used_at FROM files")[0]
        with a._tx() as tx:
            assert a._delete_file(tx, sha, float(used))
        assert a.get_file(sha) is None
        assert a._read("SELECT count(*) FROM file_chunks")[0][0] == 0
    finally:
        a.close()
        b.close()


def old_database(path: Path, version: int) -> sqlite3.Connection:
    """A SQLite file as servers before schema_migrations left it, at `version`."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    for script in (ddl.SQLITE_1, ddl.SQLITE_2, ddl.SQLITE_3, ddl.SQLITE_4)[:version]:
        for statement in statements(script):
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.execute("COMMIT")
    return db


def test_an_old_sqlite_file_is_upgraded_with_its_jobs_and_files(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = old_database(path, 4)
    data = os.urandom(2 * CHUNK_BYTES + 7)
    sha = hashlib.sha256(data).hexdigest()
    db.execute(
        "INSERT INTO files (sha256, data, media_type, size, created_at, used_at) "
        "VALUES (?, ?, 'application/octet-stream', ?, 1.0, 2.0)",
        (sha, data, len(data)),
    )
    db.execute(
        "INSERT INTO jobs (id, spec, workload, path, requirements, status, attempts, "
        "created_at, updated_at, queued_at) VALUES ('j', '{}', 'matmul', 'jax-cpu', '{}', "
        "'done', 1, 1.0, 1.0, 1.0)"
    )
    db.close()
    store = Store.open(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        job = store.get_job("j")
        assert job is not None and job.status == "done"
        got = store.get_file(sha)
        assert got is not None and got.data == data
        assert store._read("SELECT count(*) FROM file_chunks")[0][0] == 3
        names = [r[1] for r in store._read("PRAGMA table_info(files)")]
        assert "data" not in names and "chunks_key" in names
        applied = [r[0] for r in store._read("SELECT version FROM schema_migrations")]
        assert applied == list(range(1, SCHEMA_VERSION + 1))
    finally:
        store.close()
    with sqlite3.connect(path) as check:  # an older server still sees the newer version
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_version_1_database_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    old_database(path, 1).close()
    store = Store.open(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.put_file(b"x", "text/plain")
    finally:
        store.close()
