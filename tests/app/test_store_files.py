"""Content-addressed files in the store, on both backends: kept once, in chunks; read
back through another replica a chunk at a time, whole, or seeking, never holding the
file whole in memory; a file that retention would remove at once is refused; a blob
whose writer died is removed; and files in an older SQLite database moved into chunks
when it is upgraded."""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import SCHEMA_VERSION, NewJob, Store, ddl
from app.store import files as files_module
from app.store.files import CHUNK_BYTES, FileWouldGo
from app.store.migrations import statements

MiB = 1024 * 1024


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def read(store: Store, sha: str) -> bytes | None:
    chunks = store.file_chunks(sha)
    return None if chunks is None else b"".join(chunks)


def test_files_are_kept_once_in_chunks_and_served_by_another_replica(db: str) -> None:
    a, b = Store.open(db), Store.open(db)
    try:
        data = os.urandom(2 * CHUNK_BYTES + 12345)
        sha = a.put_file(pieces(data, 64 * 1024), "application/octet-stream")
        assert sha == hashlib.sha256(data).hexdigest()
        info = b.file_info(sha)
        assert info is not None and info.size == len(data)
        chunks = list(b.file_chunks(sha) or [])
        assert [len(c) for c in chunks] == [CHUNK_BYTES, CHUNK_BYTES, 12345]
        assert b"".join(chunks) == data
        # The same bytes again, through the other replica: stored once.
        assert b.put_file(data, "application/octet-stream") == sha
        assert a._read("SELECT count(*) FROM file_chunks")[0][0] == 3
        assert a._read("SELECT count(*) FROM file_blobs")[0][0] == 1
        assert a.files_bytes() == len(data)
        small = b"\x00\x01 exported function \xff"
        assert read(a, b.put_file(small, "application/octet-stream")) == small
        assert a.file_info("0" * 64) is None and a.file_chunks("0" * 64) is None
        assert a.job_file("nope", "fn") is None
        assert read(a, a.put_file(b"", "text/plain")) == b""
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
        assert a.file_info(sha) is not None
        (used,) = a._read("SELECT used_at FROM files")[0]
        with a._tx() as tx:
            assert a._delete_file(tx, sha, float(used))
        assert a.file_info(sha) is None
        assert a._read("SELECT count(*) FROM file_chunks")[0][0] == 0
        assert a._read("SELECT count(*) FROM file_blobs")[0][0] == 0
    finally:
        a.close()
        b.close()


def test_the_same_bytes_stored_through_two_replicas_at_once_are_kept_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica B names the bytes after A looked for them and before A names them (two
    writers at once, which only PostgreSQL has): one file, one blob; A's chunks go."""
    a, b = Store.open(pg_url), Store.open(pg_url)
    data = b"the same bytes " * 1000
    counted = files_module.needed_bytes

    def b_names_them_meanwhile(tx: object) -> int:
        other = threading.Thread(target=b.put_file, args=(data, "text/plain"))
        other.start()
        other.join(30)
        return counted(tx)  # type: ignore[arg-type]

    monkeypatch.setattr(files_module, "needed_bytes", b_names_them_meanwhile)
    try:
        sha = a.put_file(data, "text/plain", files_max_bytes=10**9)
        assert sha == hashlib.sha256(data).hexdigest()
        assert a._read("SELECT count(*) FROM files")[0][0] == 1
        assert a._read("SELECT count(*) FROM file_blobs")[0][0] == 1
        assert a._read("SELECT count(*) FROM file_chunks")[0][0] == 1
        assert read(a, sha) == read(b, sha) == data
    finally:
        a.close()
        b.close()


def pattern(size: int, piece: int = 300_000) -> Iterator[bytes]:
    """`size` bytes in pieces of an odd size, the same every time: piece k counts
    k, k + 1, … modulo 251 (sliced from one cycle, so making them costs little)."""
    cycle = bytes(range(251)) * (piece // 251 + 2)
    for start in range(0, size, piece):
        offset = (start // piece) % 251
        yield cycle[offset : offset + min(piece, size - start)]


def test_a_file_is_stored_from_a_stream_and_read_back_in_chunks(db: str) -> None:
    store = Store.open(db)
    try:
        size = 3 * MiB + 12345
        expected = b"".join(pattern(size))
        sha = store.put_file(pattern(size), "application/x-npz")
        assert sha == hashlib.sha256(expected).hexdigest()
        chunks = list(store.file_chunks(sha) or [])
        assert [len(c) for c in chunks] == [MiB, MiB, MiB, 12345]
        assert b"".join(chunks) == expected
        reader = store.open_file(sha)
        assert reader is not None
        with reader:
            reader.seek(MiB - 10)
            assert reader.read(20) == expected[MiB - 10 : MiB + 10]
            reader.seek(-5, io.SEEK_END)
            assert reader.read() == expected[-5:]
            reader.seek(0)
            assert hashlib.sha256(reader.read()).hexdigest() == sha
        empty = store.put_file(iter([]), "text/plain")
        assert list(store.file_chunks(empty) or []) == [b""]
    finally:
        store.close()


def test_storing_and_reading_a_file_does_not_hold_it_in_memory(db: str) -> None:
    store = Store.open(db)
    size = 48 * MiB
    try:
        tracemalloc.start()
        sha = store.put_file(pattern(size, 64 * 1024), "application/octet-stream")
        _, stored_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        digest = hashlib.sha256()
        for chunk in store.file_chunks(sha) or []:
            digest.update(chunk)
        _, read_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert digest.hexdigest() == sha
        # A chunk or two of 1 MiB in flight, not the 48 MiB file.
        assert stored_peak < 6 * MiB, stored_peak
        assert read_peak < 6 * MiB, read_peak
    finally:
        tracemalloc.stop()
        store.close()


def test_a_file_retention_would_remove_at_once_is_refused(db: str) -> None:
    store = Store.open(db)
    try:
        needed = store.put_file(b"n" * 6000, "application/x-npz")
        spec = {"workload": "exported", "path": "jax-cpu", "params": {"artifact": needed}}
        with store.admitting("c") as admitting:
            admitting.insert([NewJob("j1", spec, {})])
        with pytest.raises(FileWouldGo, match="6,000 bytes of files that queued"):
            store.put_file(b"x" * 5000, "application/x-npz", files_max_bytes=10_000)
        assert store.put_file(b"y" * 4000, "application/x-npz", files_max_bytes=10_000)
        blobs = store._read("SELECT count(*) FROM file_blobs")[0][0]
        assert blobs == 2  # the refused file left no chunks behind
    finally:
        store.close()


def test_a_blob_whose_writer_died_is_removed(db: str) -> None:
    store = Store.open(db)
    try:

        def dies() -> Iterator[bytes]:
            yield b"half a file"
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            store.put_file(dies(), "text/plain")
        assert store._read("SELECT count(*) FROM file_chunks")[0][0] == 0
        # A writer killed outright leaves its blob: retention takes it once it is stale.
        (blob,) = store._read("INSERT INTO file_blobs (started_at) VALUES (0) RETURNING id")[0]
        store._read("INSERT INTO file_chunks (blob, seq, data) VALUES (?, 0, ?)", (blob, b"\0"))
        fresh = store.put_file(b"a file being named now", "text/plain")
        store.prune(
            keep_jobs=10,
            finished_age_s=3600,
            unused_age_s=3600,
            files_max_bytes=MiB,
            attached_media="application/gzip",
        )
        assert store._read("SELECT count(*) FROM file_chunks")[0][0] == 1
        assert read(store, fresh) == b"a file being named now"
    finally:
        store.close()


def old_database(path: Path, version: int) -> sqlite3.Connection:
    """A SQLite file as servers before schema_migrations left it, at `version` (5: as
    issue 23's chunked files left it)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    scripts = (ddl.SQLITE_1, ddl.SQLITE_2, ddl.SQLITE_3, ddl.SQLITE_4, ddl.SQLITE_5)
    for script in scripts[:version]:
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
    for content in (data, b""):
        db.execute(
            "INSERT INTO files (sha256, data, media_type, size, created_at, used_at) "
            "VALUES (?, ?, 'application/octet-stream', ?, 1.0, 2.0)",
            (hashlib.sha256(content).hexdigest(), content, len(content)),
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
        assert [len(c) for c in store.file_chunks(sha) or []] == [CHUNK_BYTES, CHUNK_BYTES, 7]
        assert read(store, sha) == data
        assert read(store, hashlib.sha256(b"").hexdigest()) == b""
        assert store._read("SELECT count(*) FROM file_chunks")[0][0] == 4
        names = [r[1] for r in store._read("PRAGMA table_info(files)")]
        assert "data" not in names and "blob" in names
        applied = [r[0] for r in store._read("SELECT version FROM schema_migrations")]
        assert applied == list(range(1, SCHEMA_VERSION + 1))
    finally:
        store.close()
    with sqlite3.connect(path) as check:  # an older server still sees the newer version
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_file_with_chunked_files_is_upgraded_keeping_them(tmp_path: Path) -> None:
    """A file at version 5 (files in chunks, before several servers) keeps its files."""
    path = tmp_path / "v5.sqlite3"
    db = old_database(path, 5)
    db.execute("INSERT INTO file_blobs (id, started_at) VALUES (7, 1.0)")
    db.execute("INSERT INTO file_chunks (blob, seq, data) VALUES (7, 0, x'0102')")
    db.execute(
        "INSERT INTO files (sha256, blob, media_type, size, created_at, used_at) "
        "VALUES (?, 7, 'text/plain', 2, 1.0, 1.0)",
        (hashlib.sha256(b"\x01\x02").hexdigest(),),
    )
    db.close()
    store = Store.open(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert read(store, hashlib.sha256(b"\x01\x02").hexdigest()) == b"\x01\x02"
        applied = [r[0] for r in store._read("SELECT version FROM schema_migrations")]
        assert applied == list(range(1, SCHEMA_VERSION + 1))
    finally:
        store.close()


def test_a_version_1_database_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    old_database(path, 1).close()
    store = Store.open(path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.put_file(b"x", "text/plain")
    finally:
        store.close()
