"""Matrices in the job store: the submission and its cells. A part of `app.store.Store`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.store.base import StoreBase


@dataclass(frozen=True)
class MatrixRow:
    """A stored matrix: its validated spec as JSON and when it was made."""

    id: str
    spec: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class CellRow:
    """A stored cell: its job, or the reason it has none."""

    row: int
    col: int
    job_id: str | None
    reason: str | None


class Matrices(StoreBase):
    """insert_matrix / get_matrix / matrix_cells / list_matrices on the store."""

    def insert_matrix(
        self,
        matrix_id: str,
        spec: dict[str, Any],
        cells: Sequence[CellRow],
    ) -> None:
        with self._tx() as tx:
            tx.execute(
                self._sql("INSERT INTO matrices (id, spec, created_at) VALUES (?, ?, {NOW})"),
                (matrix_id, json.dumps(spec)),
            )
            tx.executemany(
                "INSERT INTO matrix_cells (matrix_id, row, col, job_id, reason) "
                "VALUES (?, ?, ?, ?, ?)",
                [(matrix_id, c.row, c.col, c.job_id, c.reason) for c in cells],
            )

    def get_matrix(self, matrix_id: str) -> MatrixRow | None:
        rows = self._read("SELECT id, spec, created_at FROM matrices WHERE id = ?", (matrix_id,))
        if not rows:
            return None
        return MatrixRow(rows[0][0], json.loads(rows[0][1]), float(rows[0][2]))

    def matrix_cells(self, matrix_id: str) -> list[CellRow]:
        rows = self._read(
            "SELECT row, col, job_id, reason FROM matrix_cells WHERE matrix_id = ? "
            "ORDER BY row, col",
            (matrix_id,),
        )
        return [CellRow(int(r[0]), int(r[1]), r[2], r[3]) for r in rows]

    def list_matrices(self, limit: int = 50) -> list[MatrixRow]:
        rows = self._read(
            "SELECT id, spec, created_at FROM matrices ORDER BY created_at DESC LIMIT ?", (limit,)
        )
        return [MatrixRow(r[0], json.loads(r[1]), float(r[2])) for r in rows]
