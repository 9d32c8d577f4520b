"""The job store's runs, their artifacts and the workers.

A part of `app.store.Store`, on the connection of `app.store.base.StoreBase`.
"""

from __future__ import annotations

import json
from typing import Any

from app.store.base import StoreBase
from app.store.jobs import end_in_tx
from app.store.schema import NewRun, RunRow, WorkerRow
from workers.protocol import JobStatus


class Runs(StoreBase):
    """finish_job (a run in, its job done), runs and artifacts out, and the workers."""

    def finish_job(
        self, job_id: str, attempt: int, worker_id: str, run: NewRun, now: float
    ) -> bool:
        """Store a run and mark its job done, in one transaction; False if already final."""
        with self._tx() as db:
            if not end_in_tx(
                db,
                job_id,
                JobStatus.DONE,
                None,
                now,
                (JobStatus.QUEUED, JobStatus.RUNNING),
                None,
            ):
                return False
            stages = run.stage_seconds
            cur = db.execute(
                "INSERT INTO runs (job_id, attempt, worker_id, result, truncated, valid, "
                "trace_s, lower_s, compile_s, run_s, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    attempt,
                    worker_id,
                    run.result_json,
                    json.dumps(run.truncated),
                    int(run.valid),
                    stages.get("trace"),
                    stages.get("lower"),
                    stages.get("compile"),
                    run.run_s,
                    now,
                ),
            )
            run_id = cur.lastrowid
            db.executemany(
                "INSERT INTO artifacts (run_id, name, text, truncated) VALUES (?,?,?,?)",
                [(run_id, name, text, int(cut)) for name, (text, cut) in run.artifacts.items()],
            )
            # Keep the newest `retain_runs` runs; artifacts go with them (ON DELETE CASCADE).
            db.execute(
                "DELETE FROM runs WHERE id <= "
                "(SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?)",
                (self.retain_runs,),
            )
            return True

    def get_run(self, job_id: str) -> RunRow | None:
        rows = self._read(
            "SELECT id, job_id, attempt, worker_id, result, truncated, run_s, created_at "
            "FROM runs WHERE job_id = ? ORDER BY id DESC LIMIT 1",
            (job_id,),
        )
        if not rows:
            return None
        r = rows[0]
        names = self._read("SELECT name FROM artifacts WHERE run_id = ? ORDER BY name", (r[0],))
        return RunRow(
            id=r[0],
            job_id=r[1],
            attempt=r[2],
            worker_id=r[3],
            result=r[4],
            truncated=json.loads(r[5]),
            run_s=r[6],
            created_at=r[7],
            artifact_names=[n[0] for n in names],
        )

    def get_artifact(self, job_id: str, name: str) -> tuple[str, bool] | None:
        """The full text of a run's artifact, and whether it was cut at the storage cap."""
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
                if value is not None:
                    out[name].append(float(value))
        return out

    def count_runs(self) -> int:
        return int(self._read("SELECT count(*) FROM runs")[0][0])

    def upsert_worker(
        self, worker_id: str, name: str | None, capabilities: dict[str, Any], now: float
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO workers (id, name, capabilities, registered_at, last_heartbeat) "
                "VALUES (?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                "capabilities = excluded.capabilities, last_heartbeat = excluded.last_heartbeat",
                (worker_id, name, json.dumps(capabilities), now, now),
            )

    def touch_worker(self, worker_id: str, now: float) -> None:
        with self._tx() as db:
            db.execute("UPDATE workers SET last_heartbeat = ? WHERE id = ?", (now, worker_id))

    def worker_name(self, worker_id: str) -> str | None:
        """The name a worker registered with (None when it gave none or is unknown)."""
        rows = self._read("SELECT name FROM workers WHERE id = ?", (worker_id,))
        return str(rows[0][0]) if rows and rows[0][0] else None

    def list_workers(self, seen_since: float = 0.0) -> list[WorkerRow]:
        rows = self._read(
            "SELECT id, name, capabilities, registered_at, last_heartbeat, current_job "
            "FROM workers WHERE last_heartbeat >= ? ORDER BY registered_at",
            (seen_since,),
        )
        return [WorkerRow(r[0], r[1], json.loads(r[2]), r[3], r[4], r[5]) for r in rows]
