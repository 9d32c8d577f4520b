"""`boundary run --server URL`: submit a job to a server (its URL, or its unix socket,
`unix:PATH`), follow it, print its run.

The run is printed exactly as a local `boundary run` prints it (one JSON document on
stdout with --json); progress and errors go to stderr. Inline artifacts are capped by
the server, so the full text of any cut artifact is fetched before printing.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import httpx

from workers.export.api_client import Refused, ServerLost, refusal_text, wait_ended
from workers.export.server_address import ServerAddress
from workers.protocol import FINAL_STATUSES, JobSpec, JobStatus, RunResult

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130
SUBMIT_TOKEN_ENV = "BOUNDARY_SUBMIT_TOKEN"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def _follow_events(client: httpx.AsyncClient, job_id: str, show_progress: bool) -> None:
    """Read the job's event stream until a final status (or the stream breaks)."""
    event = ""
    async with client.stream("GET", f"/api/v1/jobs/{job_id}/events", timeout=None) as response:
        if response.status_code != 200:
            return
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data = json.loads(line.partition(":")[2])
                if event == "status":
                    if show_progress:
                        _say(f"[{data['status']}] job {job_id}")
                    if data["status"] in FINAL_STATUSES:
                        return
                elif event == "progress" and show_progress:
                    count = f" {data['k']}/{data.get('n') or 'auto'}" if data.get("k") else ""
                    _say(f"[{data['phase']}]{count}")


def _wait_final(
    server: ServerAddress, token: str | None, job_id: str, show_progress: bool
) -> dict[str, Any]:
    """The job once it reached a final status, following its events on the way; a server
    that restarts is waited for (`wait_ended`)."""

    async def wait() -> dict[str, Any]:
        async with server.async_client(token, timeout=30.0) as client:
            return await wait_ended(
                client,
                f"/api/v1/jobs/{job_id}",
                between=lambda: _follow_events(client, job_id, show_progress),
                lost=lambda why: _say(f"server unreachable ({why}); retrying"),
            )

    return anyio.run(wait)


def _full_run(client: httpx.Client, job: dict[str, Any]) -> RunResult:
    run = dict(job["run"])
    artifacts = dict(run.get("artifacts") or {})
    for name in run.get("artifacts_truncated", []):
        link = run.get("artifact_links", {}).get(name)
        if link:
            response = client.get(link)
            response.raise_for_status()
            artifacts[name] = response.text
    run["artifacts"] = artifacts
    return RunResult.model_validate(run)


def _print_ir(client: httpx.Client, job_id: str, run: dict[str, Any], ir: str) -> int:
    """`--ir NAME` with `--server`: the artifact's full text from the server's artifact
    endpoint, as a local run prints it; exit 1 when the run has none."""
    response = client.get(f"/api/v1/jobs/{job_id}/artifacts/{ir}")
    if response.status_code == 404:
        path = run.get("job", {}).get("path", "this")
        _say(f"no {ir} artifact: path {path} does not produce one (run {job_id})")
        return EXIT_FAILED
    response.raise_for_status()
    text = response.text
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK if run.get("valid") else EXIT_FAILED


def _server_lines(server: ServerAddress, job_id: str, run: RunResult) -> list[str]:
    """Where the run lives on the server: its page, and a profiled run's trace."""
    page = server.link(f"/runs/{job_id}")
    lines = [f"run page  {page}"]
    if run.profile is not None:
        lines.append(
            f"profile   {run.profile.covers}; kept by the server: {page}/profile (the archive, "
            f"for XProf or Perfetto), {page}/profile/timeline (in the browser)"
        )
    return lines


def submit_to_server(
    job: JobSpec,
    server: ServerAddress,
    as_json: bool,
    token: str | None = None,
    *,
    ir: str | None = None,
) -> int:
    """Submit `job` to `server`, wait for its run and print it; the exit status.

    `token` (default: $BOUNDARY_SUBMIT_TOKEN) is sent as a bearer token when given.
    `ir` prints that artifact alone, fetched whole from the server. Exit status: 0 for a
    valid run, 1 for a run that failed its check (or has no such artifact) or a job that
    failed, expired or was cancelled, 2 when the server refused the job.
    """
    from workers.cli.printout import print_result

    token = token or os.environ.get(SUBMIT_TOKEN_ENV) or None
    with server.client(token, timeout=30.0) as client:
        try:
            response = client.post("/api/v1/jobs", json=job.model_dump(mode="json"))
        except httpx.TransportError as exc:
            _say(f"boundary run: cannot reach {server}: {exc}")
            return EXIT_REFUSED
        if response.status_code != 202:
            _say(f"boundary run: the server refused the job: {refusal_text(response)}")
            return EXIT_REFUSED
        job_id = response.json()["id"]
        page = server.link(f"/runs/{job_id}")
        _say(f"job {job_id} queued: {page}")
        try:
            final = _wait_final(server, token, job_id, show_progress=sys.stderr.isatty())
        except KeyboardInterrupt:
            _say(f"stopped waiting; job {job_id} goes on: {page}")
            return EXIT_INTERRUPTED
        except (Refused, ServerLost) as exc:
            _say(f"boundary run: stopped waiting for job {job_id}: {exc}")
            return EXIT_FAILED
        if final["status"] != JobStatus.DONE or final.get("run") is None:
            _say(f"boundary run: job {job_id} {final['status']}: {final.get('reason')}")
            if final.get("stderr_tail"):
                _say(f"last lines of the runner's stderr:\n{final['stderr_tail']}")
            return EXIT_FAILED
        if ir is not None and not as_json:
            return _print_ir(client, job_id, final["run"], ir)
        run = _full_run(client, final)
        status = print_result(run, as_json, None)
        if not as_json:
            print("\n".join(_server_lines(server, job_id, run)))
        return status
