"""The job store's runs and their artifacts: a run in (its job done, exactly once), runs
and artifacts out.

A part of `app.store.Store`, on the backend of `app.store.base.StoreBase`.
"""

from __future__ import annotations

import dataclasses
import json

from app.store.base import StoreBase
from app.store.channel import CHANNEL, News, encode
from app.store.jobs import CLEAR_WORKER, event_in
from app.store.schema import FollowUp, NewRun, RunRow
from workers.catalog.published import published, run_seconds, without_server_fields
from workers.protocol import JobStatus, RunResult
from workers.protocol.dumps import (
    DUMP_ARTIFACTS,
    STORED_APART,
    dumps_job_id,
    expected_dumps,
    merge_dumps,
)


def reread(result: str, run_s: float | None) -> tuple[str, float | None]:
    """A stored run and its whole-job time as today's rules publish them: a run stored
    before a rule was added shows no figure the rule would now withhold. What the server
    added to the run (its HLO explained, the worker's ceilings) is kept as stored."""
    try:
        stored = RunResult.model_validate_json(result)
    except ValueError:  # no run result (a store test's placeholder): nothing to rule on
        return result, run_s
    again = published(stored, worker_valid=stored.valid)
    # The server's own fields (its HLO explained, the worker's ceilings, a chip's
    # instructions' kinds and estimates, where they still stand) and the summary it worked
    # out from the stored HLO are kept as stored.
    again = without_server_fields(again, stored)
    again = again.model_copy(update={"hlo_summary": stored.hlo_summary})
    return again.model_dump_json(), run_seconds(again, run_s, None)


# Exactly once: only the holder of the job's current lease moves it from running to done;
# a second finish, or one on a lease that ended, matches no row and stores nothing.
_DONE = (
    "UPDATE jobs SET status = 'done', reason = NULL, stderr_tail = NULL, lease_owner = NULL, "
    "lease_deadline = NULL, lease_id = NULL, updated_at = {NOW} "
    "WHERE id = ? AND status = 'running' AND lease_id = ? AND lease_owner = ?"
)
_RUN_COLUMNS = (
    "job_id, attempt, worker_id, result, truncated, valid, trace_s, lower_s, compile_s, run_s, "
    "created_at"
)
_INSERT_RUN = f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {{NOW}}) "
_ARTIFACT = "INSERT INTO artifacts (run_id, name, text, truncated) VALUES (?, ?, ?, ?)"
# Keep the newest `retain_runs` runs; artifacts go with them (ON DELETE CASCADE). Rows
# another finisher is deleting are skipped, never waited for.
_TRIM = (
    "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE id <= "
    "(SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?){SKIP_LOCKED})"
)
FINISH_ONE = {
    # PostgreSQL stores the run, its artifacts, the worker's row and the event, keeps the
    # newest runs and tells the other replicas, in the statement that ends the job (one
    # round trip). Its parts see the tables as the statement began, without the new run,
    # so its trim is given retain_runs - 1. SQLite runs the steps in a transaction, then
    # _TRIM (and has no other replica to tell).
    "postgresql": (
        f"WITH done AS ({_DONE} RETURNING id, attempts, worker_id), "
        f"run AS (INSERT INTO runs ({_RUN_COLUMNS}) SELECT id, attempts, worker_id, "
        "?, ?, ?, ?, ?, ?, ?, {NOW} FROM done RETURNING id, attempt), "
        "a AS (INSERT INTO artifacts (run_id, name, text, truncated) SELECT run.id, x.name, "
        "x.text, x.cut FROM run, unnest(?::text[], ?::text[], ?::int[]) AS x (name, text, cut)), "
        "w AS (UPDATE workers SET current_job = NULL FROM done "
        "WHERE workers.id = done.worker_id AND workers.current_job = done.id), "
        "e AS (INSERT INTO job_events (job_id, status, at, detail) "
        "SELECT id, 'done', {NOW}, 'done' FROM done), "
        "t AS (DELETE FROM runs WHERE EXISTS (SELECT 1 FROM done) AND id IN (SELECT id "
        "FROM runs WHERE id <= (SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?) "
        "FOR UPDATE SKIP LOCKED)) "
        f"SELECT attempt, pg_notify('{CHANNEL}', ?) FROM run"
    )
}


class Runs(StoreBase):
    """finish_job (a run in, its job done) and runs and artifacts out."""

    def finish_job(self, job_id: str, lease_id: str, worker_id: str, run: NewRun) -> int | None:
        """Store a run and mark its job done, while `lease_id` held by `worker_id` is its
        current lease; the attempt (the server's count), or None when that lease ended.
        Other replicas hear that the job is done from the store, with the change."""
        stages = run.stage_seconds
        values = (
            run.result_json,
            json.dumps(run.truncated),
            int(run.valid),
            stages.get("trace"),
            stages.get("lower"),
            stages.get("compile"),
            run.run_s,
        )
        one = FINISH_ONE.get(self.dialect.name)
        if one is None:
            attempt = self._finish_in_steps(job_id, lease_id, worker_id, values, run)
            if attempt is not None:
                self._read(_TRIM, (self.retain_runs,))
            return attempt
        names = list(run.artifacts)
        done = {"id": job_id, "status": JobStatus.DONE.value}
        rows = self._read(
            one,
            (
                job_id,
                lease_id,
                worker_id,
                *values,
                names,
                [run.artifacts[n][0] for n in names],
                [int(run.artifacts[n][1]) for n in names],
                self.retain_runs - 1,
                encode(self.origin, News("status", job_id, done)),
            ),
        )
        return int(rows[0][0]) if rows else None

    def _finish_in_steps(
        self,
        job_id: str,
        lease_id: str,
        worker_id: str,
        values: tuple[object, ...],
        run: NewRun,
    ) -> int | None:
        with self._tx() as tx:
            done = tx.execute(
                self._sql(f"{_DONE} RETURNING attempts, worker_id"), (job_id, lease_id, worker_id)
            )
            if not done:
                return None
            attempt, holder = int(done[0][0]), done[0][1]
            run_id = tx.execute(
                self._sql(f"{_INSERT_RUN} RETURNING id"), (job_id, attempt, holder, *values)
            )[0][0]
            tx.executemany(
                _ARTIFACT,
                [(run_id, name, text, int(cut)) for name, (text, cut) in run.artifacts.items()],
            )
            tx.execute(CLEAR_WORKER, (holder, job_id))
            event_in(tx, self.dialect, job_id, JobStatus.DONE, JobStatus.DONE.value)
        return attempt

    def get_run(self, job_id: str) -> RunRow | None:
        """A job's newest run, its figures through today's rules (`reread`), with what
        its follow-up brought once that is done (`workers.protocol.dumps`)."""
        run = self._newest_run(job_id)
        if run is None:
            return None
        follow = self._read(
            "SELECT status, reason, spec FROM jobs WHERE id = ?", (dumps_job_id(job_id),)
        )
        if not follow:
            return run
        status, reason, spec = follow[0]
        dumps = self._newest_run(dumps_job_id(job_id)) if status == JobStatus.DONE else None
        # (A done follow-up whose run retention removed brings nothing, and is not pending.)
        pending = [] if status == JobStatus.DONE else expected_dumps(json.loads(spec))
        followup = FollowUp(dumps_job_id(job_id), str(status), reason, pending)
        if dumps is None:
            return dataclasses.replace(run, followup=followup)
        try:
            merged = merge_dumps(
                RunResult.model_validate_json(run.result),
                RunResult.model_validate_json(dumps.result),
            ).model_dump_json()
        except ValueError:  # a placeholder run (store tests): nothing to merge
            merged = run.result
        names = sorted({*run.artifact_names, *set(dumps.artifact_names) & set(DUMP_ARTIFACTS)})
        truncated = run.truncated + [n for n in dumps.truncated if n in DUMP_ARTIFACTS]
        return dataclasses.replace(
            run, result=merged, artifact_names=names, truncated=truncated, followup=followup
        )

    def _newest_run(self, job_id: str) -> RunRow | None:
        rows = self._read(
            "SELECT id, job_id, attempt, worker_id, result, truncated, run_s, created_at "
            "FROM runs WHERE job_id = ? ORDER BY id DESC LIMIT 1",
            (job_id,),
        )
        if not rows:
            return None
        r = rows[0]
        names = self._read("SELECT name FROM artifacts WHERE run_id = ? ORDER BY name", (r[0],))
        result, run_s = reread(r[4], None if r[6] is None else float(r[6]))
        return RunRow(
            id=int(r[0]),
            job_id=r[1],
            attempt=int(r[2]),
            worker_id=r[3],
            result=result,
            truncated=json.loads(r[5]),
            run_s=run_s,
            created_at=float(r[7]),
            artifact_names=[n[0] for n in names],
        )

    def runs_of(self, job_id: str) -> list[tuple[int, int]]:
        """(run id, attempt) of every stored run of a job, oldest first."""
        rows = self._read("SELECT id, attempt FROM runs WHERE job_id = ? ORDER BY id", (job_id,))
        return [(int(r[0]), int(r[1])) for r in rows]

    def get_artifact(self, job_id: str, name: str) -> tuple[str, bool] | None:
        """The full text of a run's artifact, and whether it was cut at the storage cap; a
        dump its follow-up job brought, for a run that went first."""
        found = self._artifact_of(job_id, name)
        if found is None and name in STORED_APART:
            return self._artifact_of(dumps_job_id(job_id), name)
        return found

    def _artifact_of(self, job_id: str, name: str) -> tuple[str, bool] | None:
        rows = self._read(
            "SELECT a.text, a.truncated FROM artifacts a JOIN runs r ON r.id = a.run_id "
            "WHERE r.job_id = ? AND a.name = ? ORDER BY r.id DESC LIMIT 1",
            (job_id, name),
        )
        return (rows[0][0], bool(rows[0][1])) if rows else None

    def stage_seconds(self) -> dict[str, list[float]]:
        """Every stored run's trace, lower and compile seconds, for metrics."""
        rows = self._read("SELECT trace_s, lower_s, compile_s FROM runs")
        out: dict[str, list[float]] = {"trace": [], "lower": [], "compile": []}
        for row in rows:
            for name, value in zip(("trace", "lower", "compile"), row, strict=True):
                # A time stored before the rules bounded it may be negative: no time.
                if value is not None and float(value) >= 0:
                    out[name].append(float(value))
        return out

    def count_runs(self) -> int:
        return int(self._read("SELECT count(*) FROM runs")[0][0])
