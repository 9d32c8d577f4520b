"""Several replicas on one database: BOUNDARY_DB chooses the backend (and refuses what is
neither), the schema is the same on both and migrated once however many start at once,
limits are shared, news travels between replicas, and retention runs on one at a time."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi import HTTPException
from pydantic import ValidationError
from test_store_backends import in_parallel, new_run

from app.dispatch import Dispatcher
from app.dispatch.progress import Notice, ProgressHub
from app.queue.admission import Admission
from app.queue.submission import validate_job
from app.settings import Settings
from app.store import (
    SCHEMA_VERSION,
    BadDatabaseSetting,
    NewJob,
    Store,
    StoreUnavailable,
    Timeouts,
    parse_db,
)
from app.store.channel import MAX_PAYLOAD, News, decode, encode
from app.store.dialect import lock_key
from app.store.retention import RETENTION_LOCK
from tests.app.bench_fakes import MATMUL, capabilities
from workers.protocol import JobStatus, ProgressEvent

CPU = {"path": "jax-cpu", "platform": "cpu"}
ROOT = Path(__file__).resolve().parents[2]


# --- which database ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("var/boundary.sqlite3", "sqlite"),
        ("/tmp/x.sqlite3", "sqlite"),
        ("./postgresql:x", "sqlite"),
        ("C:\\data\\b.sqlite3", "sqlite"),
        ("postgresql://boundary@db.example.org:5432/boundary", "postgresql"),
        ("postgres://u:secret@127.0.0.1/b?sslmode=require", "postgresql"),
    ],
)
def test_the_db_setting_chooses_the_backend(value: str, kind: str) -> None:
    assert parse_db(value).kind == kind


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("postgresql:x", "is not a PostgreSQL URL"),
        ("postgresql:///boundary", "is not a PostgreSQL URL"),
        ("postgresql://u:secret@host:5432", "names no database"),
        ("sqlite:///var/b.sqlite3", "give the file path itself"),
        ("mysql://u@h/db", "the scheme 'mysql' is not supported"),
        ("  ", "it is empty"),
    ],
)
def test_other_db_settings_are_refused_with_what_to_write(value: str, says: str) -> None:
    with pytest.raises(BadDatabaseSetting, match=says) as refused:
        parse_db(value)
    assert "secret" not in str(refused.value)  # a password is never repeated
    with pytest.raises(ValidationError, match=says):
        Settings(DB=value)


def test_serve_refuses_a_url_where_a_path_was_meant_and_makes_no_folder(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "BOUNDARY_DB": "postgresql:boundary"}
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--workers", "0", "--port", "1"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "BOUNDARY_DB" in done.stderr and "is not a PostgreSQL URL" in done.stderr
    assert list(tmp_path.iterdir()) == []  # before: a folder named "postgresql:" appeared


def test_an_unreachable_database_stops_start_up_naming_it_without_its_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # a port nothing listens on
        url = f"postgresql://boundary:secret@127.0.0.1:{s.getsockname()[1]}/boundary"
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"boundary:\*\*\*@127\.0\.0\.1") as failed:
            Store.open(url, timeouts=Timeouts(connect_s=1))
    assert "secret" not in str(failed.value)
    assert time.monotonic() - started < 10  # bounded, not a hang


@pytest.mark.parametrize("allowed", [False, True], ids=["required", "allowed-missing"])
def test_without_postgresql_its_tests_fail_saying_how_to_install_it(
    tmp_path: Path, allowed: bool
) -> None:
    env = {**os.environ, "BOUNDARY_PG_BINDIR": str(tmp_path)}  # a folder without it
    env.pop("BOUNDARY_ALLOW_MISSING", None)
    if allowed:
        env["BOUNDARY_ALLOW_MISSING"] = "nvrtc,postgresql"
    test = "tests/app/test_store_backends.py::test_the_schema_is_migrated_once_and_kept"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert "apt-get install postgresql" in out, out[-2000:]
    if allowed:  # skipped, saying why; SQLite's half still runs
        assert done.returncode == 0 and "1 passed, 1 skipped" in out, out[-2000:]
    else:
        assert done.returncode == 1 and "1 passed, 1 error" in out, out[-2000:]


# --- the schema ------------------------------------------------------------------------------


def columns(store: Store) -> set[tuple[str, str]]:
    if store.dialect.name == "sqlite":
        tables = [r[0] for r in store._read("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {(t, r[1]) for t in tables for r in store._read(f"PRAGMA table_info({t})")}
    rows = store._read(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = 'public'"
    )
    return {(r[0], r[1]) for r in rows}


def test_both_backends_have_the_same_tables_and_columns(tmp_path: Path, pg_url: str) -> None:
    lite, pg = Store.open(tmp_path / "a.sqlite3"), Store.open(pg_url)
    try:
        assert lite.schema_version() == pg.schema_version() == SCHEMA_VERSION
        assert columns(lite) == columns(pg)
        assert ("workers", "key_hash") in columns(pg)
    finally:
        lite.close()
        pg.close()


def test_replicas_starting_together_migrate_once(pg_url: str) -> None:
    stores = in_parallel(4, lambda _: Store.open(pg_url))
    try:
        rows = stores[0]._read("SELECT version FROM schema_migrations ORDER BY version")
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
    finally:
        for s in stores:
            s.close()


def test_tables_live_in_public_even_with_a_schema_named_after_the_user(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA boundary")  # "$user" comes first in the search path
    Store.open(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        schemas = conn.execute(
            "SELECT DISTINCT table_schema FROM information_schema.tables WHERE table_name = 'jobs'"
        ).fetchall()
    assert schemas == [("public",)]


# --- limits shared by replicas ---------------------------------------------------------------


def replica(db: str, **changes: Any) -> tuple[Store, Admission]:
    settings = Settings(DB=db, **changes)
    store = Store.open(db)
    dispatcher = Dispatcher(store, settings)
    return store, Admission(dispatcher, settings)


def test_two_replicas_never_each_admit_a_clients_full_quota(db: str) -> None:
    replicas = [replica(db, SUBMIT_RATE=60, MAX_QUEUE_PER_CLIENT=1000) for _ in range(4)]
    replicas[0][0].register_worker("w-1", "k", None, capabilities())
    job = validate_job(MATMUL, 2**30)

    def submit(i: int) -> list[int]:
        codes = []
        for _ in range(30):
            try:
                replicas[i][1].queue("198.51.100.7", [job])
                codes.append(202)
            except HTTPException as refused:
                codes.append(refused.status_code)
        return codes

    codes = [c for per in in_parallel(4, submit) for c in per]
    assert codes.count(202) == 60 and codes.count(429) == 60
    assert replicas[1][0].count_queued("198.51.100.7") == 60
    # A second client has its own quota, on any replica.
    assert replicas[2][1].queue("198.51.100.8", [job])[0].client == "198.51.100.8"
    for store, _ in replicas:
        store.close()


def test_a_clients_queue_cap_holds_across_replicas(db: str) -> None:
    replicas = [replica(db, MAX_QUEUE_PER_CLIENT=25) for _ in range(4)]
    replicas[0][0].register_worker("w-1", "k", None, capabilities())
    job = validate_job(MATMUL, 2**30)

    def submit(i: int) -> int:
        admitted = 0
        for _ in range(10):
            try:
                replicas[i][1].queue("198.51.100.7", [job])
                admitted += 1
            except HTTPException as refused:
                assert "one client may have queued" in str(refused.detail)
        return admitted

    assert sum(in_parallel(4, submit)) == 25
    for store, _ in replicas:
        store.close()


# --- news between replicas --------------------------------------------------------------------


def test_a_message_too_long_for_the_channel_travels_without_its_data() -> None:
    big = News("progress", "job-1", {"phase": "sampling", "message": "é" * 5000})
    payload = encode("x", big)
    assert len(payload.encode()) <= MAX_PAYLOAD
    assert decode(payload) == ("x", News("progress", "job-1", {}, trimmed=True))


async def next_notice(queue: asyncio.Queue[Notice], timeout: float = 5.0) -> Notice:
    return await asyncio.wait_for(queue.get(), timeout)


async def listening(url: str, count: int, timeout: float = 10.0) -> None:
    """Wait until `count` connections to the database at `url` LISTEN: each hub's relay
    has subscribed to the channel, so a notification sent now reaches it."""
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            ).fetchone()
        if row is not None and row[0] >= count:
            return
        assert time.monotonic() < deadline, f"{count} relays did not LISTEN in {timeout} s"
        await asyncio.sleep(0.02)


@pytest.mark.anyio
async def test_progress_and_status_published_on_one_replica_reach_the_other(
    pg_url: str,
) -> None:
    a_store, b_store = Store.open(pg_url), Store.open(pg_url)
    a, b = ProgressHub(channel=a_store.channel()), ProgressHub(channel=b_store.channel())
    woken: list[str] = []
    b.on_wake(lambda: woken.append("b"))
    relays = [asyncio.create_task(h.relay()) for h in (a, b)]
    try:
        await listening(pg_url, 2)
        with a.subscribe("job-1") as on_a, b.subscribe("job-1") as on_b:
            event = ProgressEvent.model_validate({"phase": "sampling", "k": 3, "n": 20})
            assert a.publish_progress("job-1", event)
            got = await next_notice(on_b)
            assert got == Notice("progress", {"phase": "sampling", "k": 3, "n": 20})
            assert b.latest("job-1") == event  # what B's live page shows
            assert (await next_notice(on_a)).data["k"] == 3  # here at once
            a.publish_status("job-1", JobStatus.DONE, None, 1)
            assert (await next_notice(on_b)).final
            assert b.latest("job-1") is None
            a.publish_status("job-2", JobStatus.QUEUED, None, 1)  # queued again there
            for _ in range(100):
                if woken:
                    break
                await asyncio.sleep(0.02)
            assert woken == ["b"]
            await asyncio.sleep(0.2)
            assert on_a.qsize() == 1  # its own echo is skipped: only the status, once
    finally:
        for task in relays:
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
        a_store.close()
        b_store.close()


@pytest.mark.anyio
async def test_a_lease_and_a_finish_on_one_replica_tell_the_other(pg_url: str) -> None:
    a, b_store = Store.open(pg_url), Store.open(pg_url)
    b = ProgressHub(channel=b_store.channel())
    relay = asyncio.create_task(b.relay())
    try:
        await listening(pg_url, 1)
        worker, _ = a.register_worker("w-1", "k", None, capabilities())
        with a.admitting("c") as gate:
            gate.insert([NewJob("j", MATMUL, CPU)])
        with b.subscribe("j") as on_b:
            assert a.lease(worker, [json.dumps(CPU)], "l", 30) is not None
            running = await next_notice(on_b)
            assert running.data == {"id": "j", "status": "running", "attempts": 1}
            assert a.finish_job("j", "l", worker, new_run()) == 1
            assert (await next_notice(on_b)).final
    finally:
        relay.cancel()
        await asyncio.gather(relay, return_exceptions=True)
        a.close()
        b_store.close()


@pytest.mark.anyio
async def test_a_lost_channel_is_made_again_and_subscribers_look_again(pg_url: str) -> None:
    a_store, b_store = Store.open(pg_url), Store.open(pg_url)
    a, b = ProgressHub(channel=a_store.channel()), ProgressHub(channel=b_store.channel())
    relay = asyncio.create_task(b.relay())
    try:
        await listening(pg_url, 1)
        with b.subscribe("job-1") as on_b:
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN%'"
                )
            resync = await next_notice(on_b, timeout=10)
            assert resync.kind == "status" and not resync.final  # "read the job again"
            await asyncio.sleep(0.3)
            a.publish_status("job-1", JobStatus.DONE, None, 1)
            assert (await next_notice(on_b)).final  # heard again after the reconnect
    finally:
        relay.cancel()
        await asyncio.gather(relay, return_exceptions=True)
        a_store.close()
        b_store.close()


# --- retention --------------------------------------------------------------------------------

HOLD = """
import sys, time, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute("SELECT pg_advisory_lock(%s)", (int(sys.argv[2]),))
print("held", flush=True)
time.sleep(120)
"""


def test_retention_runs_on_one_replica_at_a_time_and_a_dead_holder_frees_it(
    pg_url: str,
) -> None:
    store = Store.open(pg_url)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, pg_url, str(lock_key(RETENTION_LOCK))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        args: dict[str, Any] = dict(
            keep_jobs=10, finished_age_s=3600, unused_age_s=3600, files_max_bytes=2**30,
            attached_media="application/gzip",
        )  # fmt: skip
        assert store.prune(**args) is None  # another replica prunes now
        holder.kill()  # it dies mid-prune: its lock goes with its connection
        holder.wait(10)
        deadline = time.monotonic() + 5
        while (pruned := store.prune(**args)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pruned is not None
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
        store.close()
