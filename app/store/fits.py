"""Fit searches in the job store: the search, and its probes with their verdicts.

A search and its first probes are stored inside the admission that queues their jobs
(`insert_fit_in`, `insert_probes_in`), so a search exists exactly when its first probes
were admitted. Each later probe goes in the same way; two replicas planning the same
probe meet at the probes' primary key, checked under the admission lock
(`ProbeTaken`), and the second admission rolls back whole.

A probe keeps its verdict, peak and refusal once its job ends (`record_probe`), so the
search's page still reads after retention prunes the job. A part of `app.store.Store`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.store.base import StoreBase, marks, render
from app.store.dialect import Dialect, Tx

LIVE = "running"
"""The status of a search whose probes are still being planned."""


class ProbeTaken(RuntimeError):
    """A probe planned here is stored already (another replica planned it first)."""


@dataclass(frozen=True)
class FitRow:
    """A stored search: its validated spec as JSON, whose it is, and how it stands."""

    id: str
    spec: dict[str, Any]
    client: str | None
    status: str
    reason: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class ProbeRow:
    """One probe: a value compiled for a target, its job and, once that job ended, the
    verdict and peak (or why there is none). `job_status` is the job's status now (None
    when retention pruned it)."""

    target: str
    value: int
    seq: int
    job_id: str | None
    fits: bool | None
    peak_bytes: int | None
    refused: str | None
    failed: str | None
    job_status: str | None = None
    job_reason: str | None = None

    @property
    def judged(self) -> bool:
        """Whether the probe ended: with a verdict, or with why it has none."""
        return self.fits is not None or self.failed is not None


_FIT_COLUMNS = "id, spec, client, status, reason, created_at, updated_at"


def _fit(row: Sequence[Any]) -> FitRow:
    return FitRow(row[0], json.loads(row[1]), row[2], row[3], row[4], float(row[5]), float(row[6]))


def insert_fit_in(
    tx: Tx, dialect: Dialect, fit_id: str, spec: dict[str, Any], client: str | None
) -> None:
    """Store a new search inside the caller's transaction (an admission's)."""
    tx.execute(
        render(
            dialect,
            f"INSERT INTO fits ({_FIT_COLUMNS}) VALUES (?, ?, ?, '{LIVE}', NULL, {{NOW}}, {{NOW}})",
        ),
        (fit_id, json.dumps(spec), client),
    )


def insert_probes_in(
    tx: Tx, fit_id: str, probes: Sequence[tuple[str, int, str | None, str | None]]
) -> None:
    """Store planned probes (target, value, job id, why it failed at once) inside the
    caller's transaction, numbered after the search's earlier ones; ProbeTaken when
    one of them is stored already."""
    taken = tx.execute("SELECT target, value FROM fit_probes WHERE fit_id = ?", (fit_id,))
    if {(t, int(v)) for t, v in taken} & {(t, v) for t, v, _, _ in probes}:
        raise ProbeTaken(fit_id)
    seq = len(taken)
    tx.executemany(
        "INSERT INTO fit_probes (fit_id, target, value, seq, job_id, failed) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(fit_id, t, v, seq + n, job, failed) for n, (t, v, job, failed) in enumerate(probes)],
    )


class Fits(StoreBase):
    """get_fit / fit_probes / record_probe / end_fit / live_fits / list_fits / probe_jobs on
    the store."""

    def get_fit(self, fit_id: str) -> FitRow | None:
        rows = self._read(f"SELECT {_FIT_COLUMNS} FROM fits WHERE id = ?", (fit_id,))
        return _fit(rows[0]) if rows else None

    def fit_probes(self, fit_id: str) -> list[ProbeRow]:
        """The search's probes in the order they were planned, with their jobs' status."""
        rows = self._read(
            "SELECT p.target, p.value, p.seq, p.job_id, p.fits, p.peak_bytes, p.refused, "
            "p.failed, j.status, j.reason FROM fit_probes p LEFT JOIN jobs j ON j.id = p.job_id "
            "WHERE p.fit_id = ? ORDER BY p.seq",
            (fit_id,),
        )
        return [
            ProbeRow(
                target=r[0],
                value=int(r[1]),
                seq=int(r[2]),
                job_id=r[3],
                fits=None if r[4] is None else bool(r[4]),
                peak_bytes=None if r[5] is None else int(r[5]),
                refused=r[6],
                failed=r[7],
                job_status=r[8],
                job_reason=r[9],
            )
            for r in rows
        ]

    def fit_of_job(self, job_id: str) -> str | None:
        """The search a probe's job belongs to, if it is one."""
        rows = self._read("SELECT fit_id FROM fit_probes WHERE job_id = ?", (job_id,))
        return str(rows[0][0]) if rows else None

    def record_probe(
        self,
        job_id: str,
        *,
        fits: bool | None,
        peak_bytes: int | None,
        refused: str | None,
        failed: str | None,
    ) -> bool:
        """Keep a probe's outcome once (a second record of it changes nothing)."""
        rows = self._read(
            "UPDATE fit_probes SET fits = ?, peak_bytes = ?, refused = ?, failed = ? "
            "WHERE job_id = ? AND fits IS NULL AND failed IS NULL RETURNING job_id",
            (None if fits is None else int(fits), peak_bytes, refused, failed, job_id),
        )
        return bool(rows)

    def end_fit(self, fit_id: str, status: str, reason: str | None) -> bool:
        """End a live search (done, failed, cancelled); False when it had ended."""
        rows = self._read(
            f"UPDATE fits SET status = ?, reason = ?, updated_at = {{NOW}} "
            f"WHERE id = ? AND status = '{LIVE}' RETURNING id",
            (status, reason, fit_id),
        )
        return bool(rows)

    def live_fits(self, limit: int = 200) -> list[str]:
        """Searches still planning, oldest first."""
        rows = self._read(
            f"SELECT id FROM fits WHERE status = '{LIVE}' ORDER BY created_at LIMIT ?", (limit,)
        )
        return [str(r[0]) for r in rows]

    def list_fits(self, limit: int = 50) -> list[FitRow]:
        rows = self._read(
            f"SELECT {_FIT_COLUMNS} FROM fits ORDER BY created_at DESC LIMIT ?", (limit,)
        )
        return [_fit(r) for r in rows]

    def probe_jobs(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Of `job_ids`, those that are probes of a fit search, each with its search's id."""
        if not job_ids:
            return {}
        rows = self._read(
            f"SELECT job_id, fit_id FROM fit_probes WHERE job_id IN ({marks(len(job_ids))})",
            tuple(job_ids),
        )
        return {str(r[0]): str(r[1]) for r in rows}

    def live_probe_jobs(self, job_ids: Sequence[str]) -> set[str]:
        """Of `job_ids`, those that are probes of a live search (they never expire)."""
        if not job_ids:
            return set()
        rows = self._read(
            f"SELECT p.job_id FROM fit_probes p JOIN fits f ON f.id = p.fit_id "
            f"WHERE f.status = '{LIVE}' AND p.job_id IN ({marks(len(job_ids))})",
            tuple(job_ids),
        )
        return {str(r[0]) for r in rows}
