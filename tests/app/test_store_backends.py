"""The job store behaves the same on SQLite and on PostgreSQL: every test here runs on
both (the `db` fixture), and the ones about several replicas open several stores on one
database at once, as several `boundary serve` processes would."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from app.store import SCHEMA_VERSION, Expired, NewJob, NewRun, SchemaTooNew, Store
from tests.app.bench_fakes import capabilities
from workers.protocol import JobStatus

T = TypeVar("T")
SPEC = {"workload": "matmul", "path": "jax-cpu", "params": {"m": 8}}
CPU = {"path": "jax-cpu", "platform": "cpu"}
GPU = {"path": "jax-gpu", "platform": "gpu"}
CPU_TEXT = json.dumps(CPU)


def new_run(valid: bool = True, hlo: str = "HloModule m") -> NewRun:
    return NewRun(
        result_json="{}",
        truncated=[],
        valid=valid,
        stage_seconds={"trace": 0.1, "lower": 0.2, "compile": 0.3},
        run_s=1.0,
        artifacts={"hlo": (hlo, False)},
    )


@pytest.fixture
def store(db: str) -> Iterator[Store]:
    s = Store.open(db)
    yield s
    s.close()


def queue(store: Store, *ids: str, requirements: dict[str, object] = CPU) -> None:
    with store.admitting("127.0.0.1") as admitting:
        admitting.insert([NewJob(i, SPEC, requirements) for i in ids])


def in_parallel(n: int, work: Callable[[int], T]) -> list[T]:
    """`work(0)` … `work(n - 1)` in n threads started together."""
    start = threading.Barrier(n)

    def run(i: int) -> T:
        start.wait()
        return work(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


def test_the_schema_is_migrated_once_and_kept(db: str) -> None:
    store = Store.open(db)
    assert store.schema_version() == SCHEMA_VERSION
    queue(store, "j1")
    store.close()
    again = Store.open(db)
    assert again.schema_version() == SCHEMA_VERSION
    assert again.get_job("j1") is not None
    again.close()


def test_a_newer_schema_is_refused_and_left_as_it_is(db: str) -> None:
    Store.open(db).close()
    store = Store.open(db)
    store._read(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'later', 0)",
        (SCHEMA_VERSION + 1,),
    )
    store.close()
    with pytest.raises(SchemaTooNew, match="upgrade the server"):
        Store.open(db)
    with pytest.raises(SchemaTooNew):  # refused again: nothing was changed or dropped
        Store.open(db)


def test_every_state_change_survives_reopening(db: str) -> None:
    store = Store.open(db)
    worker, key = store.register_worker("w-1", "key-1", "one", capabilities())
    queue(store, "j1")
    queue(store, "j2")
    job = store.lease(worker, [CPU_TEXT], "lease-1", 30.0)
    assert job is not None and job.id == "j1" and job.attempts == 1
    assert store.finish_job("j1", "lease-1", worker, new_run()) == 1
    assert store.finish_job("j1", "lease-1", worker, new_run()) is None  # twice: harmless
    store.close()

    store = Store.open(db)
    j1, j2 = store.get_job("j1"), store.get_job("j2")
    assert j1 is not None and j1.status == JobStatus.DONE and j1.attempts == 1
    assert j2 is not None and j2.status == JobStatus.QUEUED
    run = store.get_run("j1")
    assert run is not None and run.artifact_names == ["hlo"] and run.attempt == 1
    assert store.get_artifact("j1", "hlo") == ("HloModule m", False)
    assert [e[0] for e in store.job_events("j1")] == ["queued", "running", "done"]
    assert store.list_workers()[0].current_job is None
    # The worker's key still keeps its id, on a store opened later (another replica).
    assert store.register_worker("w-2", "key-2", "one", capabilities(), claimed_id=worker,
                                 claimed_key=key) == (worker, key)  # fmt: skip
    assert store.register_worker("w-3", "key-3", "one", capabilities(), claimed_id=worker,
                                 claimed_key="wrong")[0] == "w-3"  # fmt: skip
    store.close()


def test_old_runs_are_pruned_beyond_retain_runs(db: str) -> None:
    store = Store.open(db, retain_runs=3)
    worker, _ = store.register_worker("w-1", "k", None, capabilities())
    for i in range(5):
        queue(store, f"j{i}")
        assert store.lease(worker, [CPU_TEXT], f"l{i}", 30.0) is not None
        assert store.finish_job(f"j{i}", f"l{i}", worker, new_run()) == 1
    assert store.count_runs() == 3
    assert store.get_run("j0") is None and store.get_artifact("j0", "hlo") is None
    assert store.get_run("j4") is not None
    store.close()


def test_a_lease_takes_the_oldest_job_the_worker_can_run(store: Store) -> None:
    worker, _ = store.register_worker("w-1", "k", None, capabilities())
    queue(store, "gpu", requirements=GPU)
    queue(store, "cpu-1")
    queue(store, "cpu-2")
    before = store.db_now()
    first = store.lease(worker, [CPU_TEXT], "l1", 10.0)
    assert first is not None and first.id == "cpu-1" and first.status == JobStatus.RUNNING
    # The deadline is on the database's clock.
    assert first.lease_deadline is not None and before + 9 < first.lease_deadline < before + 12
    assert store.lease(worker, [CPU_TEXT], "l2", 10.0) is not None
    assert store.lease(worker, [CPU_TEXT], "l3", 10.0) is None  # the GPU job is not for it
    gpu = store.get_job("gpu")
    assert gpu is not None and gpu.status == JobStatus.QUEUED and gpu.attempts == 0
    pushed = store.extend_lease("cpu-1", "l1", worker, 20.0)
    assert pushed is not None and pushed > first.lease_deadline + 5
    assert store.extend_lease("cpu-1", "not-the-lease", worker, 20.0) is None


def test_many_replicas_leasing_at_once_never_lease_a_job_twice(db: str) -> None:
    setup = Store.open(db)
    workers = [setup.register_worker(f"w-{i}", "k", None, capabilities())[0] for i in range(6)]
    queue(setup, *(f"job-{i:03d}" for i in range(120)))
    replicas = [Store.open(db) for _ in workers]

    def lease_all(i: int) -> list[str]:
        taken = []
        while job := replicas[i].lease(workers[i], [CPU_TEXT], f"l-{i}-{len(taken)}", 30):
            taken.append(job.id)
        return taken

    leased = [job for taken in in_parallel(len(workers), lease_all) for job in taken]
    assert len(leased) == 120 and len(set(leased)) == 120
    assert {setup.get_job(j).attempts for j in leased} == {1}  # type: ignore[union-attr]
    for s in (setup, *replicas):
        s.close()


def test_a_job_finishes_once_however_many_times_it_is_reported(db: str) -> None:
    setup = Store.open(db)
    worker, _ = setup.register_worker("w-1", "k", None, capabilities())
    queue(setup, "j")
    assert setup.lease(worker, [CPU_TEXT], "l", 30) is not None
    replicas = [Store.open(db) for _ in range(4)]
    attempts = in_parallel(4, lambda i: replicas[i].finish_job("j", "l", worker, new_run()))
    assert sorted(attempts, key=str) == [1, None, None, None]
    assert len(setup.runs_of("j")) == 1
    assert [e[0] for e in setup.job_events("j")].count("done") == 1
    for s in (setup, *replicas):
        s.close()


def requeue_all(found: Expired) -> tuple[JobStatus, str]:
    return JobStatus.QUEUED, f"lease expired on worker {found.job.lease_owner}"


def test_expired_leases_are_requeued_once_whichever_replicas_reap(db: str) -> None:
    setup = Store.open(db)
    worker, _ = setup.register_worker("w-1", "k", None, capabilities())
    ids = [f"job-{i:02d}" for i in range(30)]
    queue(setup, *ids)
    for i, _ in enumerate(ids):
        assert setup.lease(worker, [CPU_TEXT], f"l{i}", 30) is not None
    setup._read("UPDATE jobs SET lease_deadline = {NOW} - 1")  # every lease has expired
    replicas = [Store.open(db) for _ in range(4)]

    def reap(i: int) -> list[str]:
        moved: list[str] = []
        for _ in range(5):
            moved += [job.id for job in replicas[i].reap_leases(
                lease_s=30, overdue_s=3600, outage_s=60, decide=requeue_all)]  # fmt: skip
        return moved

    moved = Counter(j for js in in_parallel(4, reap) for j in js)
    assert moved == Counter(ids)  # each exactly once
    for job_id in ids:
        job = setup.get_job(job_id)
        assert job is not None and job.status == JobStatus.QUEUED and job.lease_id is None
        events = [e[2] for e in setup.job_events(job_id)]
        assert events.count(f"lease expired on worker {worker}") == 1
    for s in (setup, *replicas):
        s.close()


@pytest.mark.parametrize("step_s", [3600.0, -3600.0], ids=["forward", "back"])
def test_a_clock_step_or_an_outage_gives_running_leases_one_full_period(
    store: Store, step_s: float
) -> None:
    worker, _ = store.register_worker("w-1", "k", None, capabilities())
    queue(store, "j")
    assert store.lease(worker, [CPU_TEXT], "l", 30) is not None
    assert store.reap_leases(lease_s=30, overdue_s=600, outage_s=60, decide=requeue_all) == []
    # As if the database's clock stepped (forward, it is also how an outage of every
    # replica looks): the last reap seems an hour away, and so does the lease's deadline.
    store._read("UPDATE reaper SET last_reap_at = last_reap_at - ?", (step_s,))
    store._read(
        "UPDATE jobs SET lease_deadline = lease_deadline - ?, leased_at = leased_at - ?",
        (step_s, step_s),
    )
    assert store.reap_leases(lease_s=30, overdue_s=600, outage_s=60, decide=requeue_all) == []
    job = store.get_job("j")
    assert job is not None and job.status == JobStatus.RUNNING
    assert job.lease_deadline is not None
    assert 28 < job.lease_deadline - store.db_now() <= 30  # one full period from now
    # Without a gap, an expired lease goes at the next reap.
    store._read("UPDATE jobs SET lease_deadline = {NOW} - 1")
    moved = store.reap_leases(lease_s=30, overdue_s=600, outage_s=60, decide=requeue_all)
    assert [j.id for j in moved] == ["j"]


def test_reaping_stamps_its_time_a_few_times_per_outage_not_at_every_reap(
    store: Store,
) -> None:
    def stamp() -> float:
        return float(store._read("SELECT last_reap_at FROM reaper")[0][0])

    assert store.reap_leases(lease_s=30, overdue_s=600, outage_s=60, decide=requeue_all) == []
    first = stamp()
    store.reap_leases(lease_s=30, overdue_s=600, outage_s=60, decide=requeue_all)
    assert stamp() == first  # an idle server does not write at every reap
    store._read("UPDATE reaper SET last_reap_at = last_reap_at - 20")  # 1/3 of an outage ago
    store.reap_leases(lease_s=30, overdue_s=600, outage_s=60, decide=requeue_all)
    assert stamp() > first - 1


def test_a_lease_held_past_the_limit_is_reaped_although_it_heartbeats(store: Store) -> None:
    worker, _ = store.register_worker("w-1", "k", None, capabilities())
    queue(store, "j")
    assert store.lease(worker, [CPU_TEXT], "l", 30) is not None
    seen: list[Expired] = []

    def fail(found: Expired) -> tuple[JobStatus, str]:
        seen.append(found)
        return JobStatus.FAILED, "ran past the limit"

    assert store.reap_leases(lease_s=30, overdue_s=0.0, outage_s=60, decide=fail)[0].id == "j"
    assert seen[0].overdue
    job = store.get_job("j")
    assert job is not None and job.status == JobStatus.FAILED
    assert job.reason == "ran past the limit"


def test_nul_in_a_workers_text_is_stored_as_a_replacement_character(store: Store) -> None:
    worker, _ = store.register_worker("w-1", "k", "name\x00", capabilities())
    queue(store, "j")
    assert store.lease(worker, [CPU_TEXT], "l", 30) is not None
    assert store.finish_job("j", "l", worker, new_run(hlo="Hlo\x00Module")) == 1
    assert store.get_artifact("j", "hlo") == ("Hlo\ufffdModule", False)
    assert store.worker_name(worker) == "name\ufffd"
    queue(store, "k")
    ended = store.end_job("k", JobStatus.FAILED, "bad\x00reason", stderr_tail="tail\x00")
    assert ended is not None and ended.reason == "bad\ufffdreason"
    assert ended.stderr_tail == "tail\ufffd"


def test_requeue_and_end_hold_only_while_their_lease_is_current(store: Store) -> None:
    worker, _ = store.register_worker("w-1", "k", None, capabilities())
    queue(store, "j")
    assert store.lease(worker, [CPU_TEXT], "first", 30) is not None
    assert store.requeue("j", "not-it", "given back") is None
    back = store.requeue("j", "first", "given back", count_attempt=False)
    assert back is not None and back.status == JobStatus.QUEUED and back.attempts == 0
    assert store.lease(worker, [CPU_TEXT], "second", 30) is not None
    assert store.end_job("j", JobStatus.FAILED, "x", lease_id="first") is None
    assert store.finish_job("j", "first", worker, new_run()) is None
    ended = store.end_job("j", JobStatus.FAILED, "x", lease_id="second")
    assert ended is not None and ended.status == JobStatus.FAILED
    assert store.list_workers()[0].current_job is None
