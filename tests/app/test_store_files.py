"""Content-addressed files in the store: kept once, attached by name, migrated in; kept in
chunks, so that storing a file from a stream and reading it back (whole, chunk by chunk,
or seeking) never holds it whole in memory; a file that retention would remove at once
is refused; a blob whose writer died is removed."""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import SCHEMA_VERSION, Store
from app.store.files import FileWouldGo


def test_files_are_kept_once_and_attached_by_name(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
    try:
        assert store.schema_version() == SCHEMA_VERSION >= 2
        data = b"\x00\x01 exported function \xff"
        sha = store.put_file(data, "application/octet-stream")
        assert sha == hashlib.sha256(data).hexdigest()
        assert store.put_file(data, "application/octet-stream") == sha  # no duplicate
        got = store.file_info(sha)
        assert got is not None and got.size == len(data)
        assert b"".join(store.file_chunks(sha) or []) == data
        assert store.file_info("0" * 64) is None and store.file_chunks("0" * 64) is None
        assert store.job_file("nope", "fn") is None
    finally:
        store.close()


def old_database(path: Path, version: int, *rows: tuple[str, tuple[object, ...]]) -> Path:
    """A database at schema `version`, holding `rows` (statement, arguments)."""
    import sqlite3

    from app.store.schema import MIGRATIONS

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    for migrate in MIGRATIONS[:version]:
        migrate(db)
    db.execute(f"PRAGMA user_version = {version}")
    for statement, args in rows:
        db.execute(statement, args)
    db.execute("COMMIT")
    db.close()
    return path


def test_a_version_1_database_is_migrated(tmp_path: Path) -> None:
    store = Store.open(old_database(tmp_path / "old.sqlite3", 1))
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.put_file(b"x", "text/plain")
    finally:
        store.close()


MiB = 1024 * 1024


def pattern(size: int, piece: int = 300_000) -> Iterator[bytes]:
    """`size` bytes in pieces of an odd size, the same every time."""
    for start in range(0, size, piece):
        yield bytes((start // piece + i) % 251 for i in range(min(piece, size - start)))


def test_a_file_is_stored_from_a_stream_and_read_back_in_chunks(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
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


def test_storing_and_reading_a_file_does_not_hold_it_in_memory(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
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


def test_a_file_retention_would_remove_at_once_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
    try:
        needed = store.put_file(b"n" * 6000, "application/x-npz")
        spec = {"workload": "exported", "params": {"artifact": needed}}
        store.insert_job("j1", {**spec, "path": "jax-cpu"}, {}, "c", 0.0)
        with pytest.raises(FileWouldGo, match="6,000 bytes of files that queued"):
            store.put_file(b"x" * 5000, "application/x-npz", files_max_bytes=10_000)
        assert store.put_file(b"y" * 4000, "application/x-npz", files_max_bytes=10_000)
        blobs = store._read("SELECT count(*) FROM file_blobs")[0][0]
        assert blobs == 2  # the refused file left no chunks behind
    finally:
        store.close()


def test_a_blob_whose_writer_died_is_removed(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
    try:

        def dies() -> Iterator[bytes]:
            yield b"half a file"
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            store.put_file(dies(), "text/plain")
        assert store._read("SELECT count(*) FROM file_chunks")[0][0] == 0
        # A writer killed outright leaves its blob: retention takes it once it is stale.
        with store._tx() as db:
            blob = db.execute("INSERT INTO file_blobs (started_at) VALUES (0)").lastrowid
            db.execute("INSERT INTO file_chunks VALUES (?, 0, x'00')", (blob,))
        store.prune(
            keep_jobs=10,
            finished_before=0,
            unused_before=0,
            files_max_bytes=MiB,
            attached_media="application/gzip",
        )
        assert store._read("SELECT count(*) FROM file_chunks")[0][0] == 0
    finally:
        store.close()


def test_files_of_a_version_4_database_are_moved_into_chunks(tmp_path: Path) -> None:
    old = b"".join(pattern(2 * MiB + 7))
    sha = hashlib.sha256(old).hexdigest()
    insert = (
        "INSERT INTO files (sha256, data, media_type, size, created_at, used_at) "
        "VALUES (?, ?, 'application/x-npz', ?, 0, 0)"
    )
    store = Store.open(old_database(tmp_path / "v4.sqlite3", 4, (insert, (sha, old, len(old)))))
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert [len(c) for c in store.file_chunks(sha) or []] == [MiB, MiB, 7]
        assert b"".join(store.file_chunks(sha) or []) == old
        columns = [r[1] for r in store._read("PRAGMA table_info(files)")]
        assert "data" not in columns
    finally:
        store.close()
