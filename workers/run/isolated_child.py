"""The child's side of `workers.run.isolated`: one job, run here, its run printed as JSON.

Run as `python -m workers.run.isolated_child` with the request on stdin.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from workers.catalog import CatalogError
from workers.protocol import JobSpec
from workers.run.base import PathUnavailable
from workers.run.engine import run_job


def _child() -> None:
    request = json.loads(sys.stdin.read())
    cache = request.get("cache_dir")
    files = request.get("files_dir")
    answer: dict[str, Any]
    try:
        run = run_job(
            JobSpec.model_validate(request["job"]),
            cache_dir=Path(cache) if cache else None,
            max_bytes=int(request["max_bytes"]),
            files_dir=Path(files) if files else None,
        )
    except CatalogError as exc:
        answer = {"kind": "catalog", "message": str(exc), "field": exc.field}
    except PathUnavailable as exc:
        answer = {"kind": "unavailable", "message": str(exc)}
    else:
        answer = {"run": run.model_dump(mode="json")}
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    _child()
