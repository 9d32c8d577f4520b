"""PostgreSQL's one-statement lease and finish against the same work in steps.

`app.store.jobs.LEASE_ONE` and `app.store.runs.FINISH_ONE` give PostgreSQL a job's lease
(the job, its worker's row, the event, the news to other replicas) and its finish (the
run, its artifacts, the worker's row, the event, the trim, the news) as one statement
each; SQLite, which has no data-modifying CTEs, runs the same steps in a transaction.
This measures what keeping two implementations buys: a throwaway PostgreSQL cluster
(tests/pgcluster.py) on this machine, one store, jobs queued, then each queued job
leased and finished by one worker, in rounds that alternate between the one-statement
path and the steps (the statements taken away for that round), medians of the
per-job times.

    .venv/bin/python bench/store_statements.py [--jobs 200] [--rounds 4]
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from pgcluster import reset, running_cluster  # noqa: E402

from app.store import NewJob, NewRun, Store  # noqa: E402
from app.store import jobs as job_sql  # noqa: E402
from app.store import runs as run_sql  # noqa: E402

SPEC = {"workload": "matmul", "path": "jax-cpu", "params": {"m": 8, "n": 8, "k": 8}}
REQUIREMENTS = {"path": "jax-cpu", "devices": 1}


@contextlib.contextmanager
def in_steps() -> Iterator[None]:
    """The store without PostgreSQL's one-statement lease and finish (SQLite's steps)."""
    lease, finish = job_sql.LEASE_ONE.pop("postgresql"), run_sql.FINISH_ONE.pop("postgresql")
    try:
        yield
    finally:
        job_sql.LEASE_ONE["postgresql"], run_sql.FINISH_ONE["postgresql"] = lease, finish


def one_round(store: Store, worker: str, jobs: int) -> float:
    """Queue `jobs`, then lease and finish each; seconds per job (lease + finish)."""
    with store.admitting("bench") as admitting:
        admitting.insert([NewJob(secrets.token_hex(8), SPEC, REQUIREMENTS) for _ in range(jobs)])
    import json

    needs = [json.dumps(REQUIREMENTS)]
    run = NewRun(
        result_json="{}",
        truncated=[],
        valid=True,
        stage_seconds={"trace": 0.001, "lower": 0.002, "compile": 0.003},
        run_s=0.01,
        artifacts={"hlo": ("HloModule m", False)},
    )
    started = time.perf_counter()
    done = 0
    while True:
        lease_id = secrets.token_hex(8)
        job = store.lease(worker, needs, lease_id, 60.0)
        if job is None:
            break
        assert store.finish_job(job.id, lease_id, worker, run) is not None
        done += 1
    assert done == jobs, done
    return (time.perf_counter() - started) / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with running_cluster() as cluster:
        reset(cluster.url)
        store = Store.open(cluster.url, retain_runs=10_000)
        worker, _ = store.register_worker("w-bench", "key", "bench", {"platform": "cpu"})
        one_round(store, worker, 20)  # warm: the pool's connections, the plans
        with in_steps():
            one_round(store, worker, 20)
        times: dict[str, list[float]] = {"one statement": [], "steps": []}
        for i in range(args.rounds):
            order = ("one statement", "steps") if i % 2 == 0 else ("steps", "one statement")
            for how in order:
                if how == "steps":
                    with in_steps():
                        times[how].append(one_round(store, worker, args.jobs))
                else:
                    times[how].append(one_round(store, worker, args.jobs))
        store.close()
    one, steps = statistics.median(times["one statement"]), statistics.median(times["steps"])
    print(
        f"lease + finish per job: one statement {one * 1e3:.2f} ms, steps {steps * 1e3:.2f} ms, "
        f"steps ÷ one statement = {steps / one:.2f}× ({args.rounds} rounds of {args.jobs} jobs)"
    )


if __name__ == "__main__":
    main()
