"""`boundary export-fn --upload URL --target …`: the artifact (its source lines and its output
sample) posted to a Boundary server, then one compile job per target and a jax-cpu run
checked against the sample, each through the server's one admission like any other
submission. The source lines are extra: a server that refuses them (an older one) is
named in the result, and the rest goes on.

Light, like the export itself: the standard library and httpx only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

GPU_MODELS = ("b200", "h100", "h200")


class UploadRefused(ValueError):
    """The server refused a file or a job; `done` holds what it had accepted before."""

    def __init__(self, message: str, done: dict[str, Any]) -> None:
        super().__init__(message)
        self.done = done


def path_of(target: str) -> str:
    """The job path a target compiles on: jax-tpu for a TPU slice, jax-gpu for NVIDIA GPUs."""
    model = target.strip().lower().split(":", 1)[0]
    return "jax-gpu" if model in GPU_MODELS else "jax-tpu"


def _refusal(response: Any) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text[:300]
    if isinstance(detail, list):
        detail = "; ".join(
            str(d.get("message"))
            if str(d.get("message")).startswith(f"{d.get('field')}:")
            else f"{d.get('field')}: {d.get('message')}"
            for d in detail
        )
    return f"{response.status_code}: {detail}"


def post_file(client: Any, base: str, data: bytes, kind: str) -> str:
    """Upload a file to /api/v1/artifacts; its SHA-256 (ValueError naming the refusal)."""
    response = client.post(
        f"{base}/api/v1/artifacts",
        params={"kind": kind},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    if response.status_code not in (200, 201):
        raise ValueError(f"the server refused the {kind} file ({_refusal(response)})")
    digest: str = response.json()["sha256"]
    return digest


def client_for(token: str | None, timeout: float = 120.0) -> Any:
    """An httpx client that presents `token` as its bearer token, if given."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(headers=headers, timeout=timeout)


def upload_all(
    server: str,
    artifact: bytes,
    *,
    sources: bytes | None = None,
    sample: bytes | None,
    rules: dict[str, Any] | None,
    seed: int,
    targets: list[str],
    token: str | None,
    dims: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Post the files, then the jobs (a symbolic artifact's at the example's `dims`); what
    the server accepted (UploadRefused otherwise)."""
    base = server.rstrip("/")
    done: dict[str, Any] = {"jobs": []}
    with client_for(token) as client:
        try:
            done["artifact"] = post_file(client, base, artifact, "exported")
            done["page"] = f"{base}/artifacts/{done['artifact']}"
        except ValueError as exc:
            raise UploadRefused(str(exc), done) from None
        if sources is not None:
            try:
                done["sources"] = post_file(client, base, sources, "sources")
            except ValueError as exc:  # the lines are extra: say so, and go on
                done["sources_refused"] = str(exc)
        try:
            if sample is not None:
                done["reference"] = post_file(client, base, sample, "npz")
        except ValueError as exc:
            raise UploadRefused(str(exc), done) from None
        # A symbolic artifact's runs and compiles are at the example's values.
        at = {"dims": dims} if dims else {}
        params: dict[str, Any] = {"artifact": done["artifact"], "seed": seed, **at}
        if rules:
            params["input_rules"] = rules
        # The compiles the user asked for first: with one worker, they do not wait behind
        # the CPU run. A compile takes the artifact alone (inputs change no compile), as
        # the artifact page's own compiles do, so the two compare as like with like.
        jobs: list[tuple[str, dict[str, Any]]] = []
        for target in targets:
            job = {
                "workload": "exported",
                "path": path_of(target),
                "target": target,
                "stages": ["compile"],
                "params": {"artifact": done["artifact"], **at},
            }
            jobs.append((f"the {target} compile", job))
        if "reference" in done:
            checked = {**params, "reference": done["reference"]}
            cpu = {"workload": "exported", "path": "jax-cpu", "params": checked}
            jobs.append(("the CPU run", cpu))
        for what, job in jobs:
            response = client.post(f"{base}/api/v1/jobs", json=job)
            if response.status_code != 202:
                raise UploadRefused(f"the server refused {what} ({_refusal(response)})", done)
            made = response.json()
            done["jobs"].append(
                {
                    "id": made["id"],
                    "path": job["path"],
                    "target": job.get("target"),
                    "page": f"{base}/runs/{made['id']}",
                }
            )
    return done


def upload_noted(
    args: Any,
    data: bytes,
    summary: dict[str, Any],
    *,
    sources: bytes | None,
    sample: bytes | None,
    rules: dict[str, Any] | None,
) -> bool:
    """export-fn's `--upload`: the files, then the jobs, noted in `summary`; False when
    the server refused something (the summary is printed then, and why)."""
    token = args.token or os.environ.get("BOUNDARY_SUBMIT_TOKEN")
    try:
        summary["uploaded"] = upload_all(
            args.upload,
            data,
            sources=sources,
            sample=sample,
            rules=rules,
            seed=args.seed,
            targets=args.target,
            token=token,
            dims=getattr(args, "dims", None),
        )
    except UploadRefused as exc:
        summary["uploaded"] = exc.done
        print(json.dumps(summary, indent=2))
        print(f"boundary export-fn: {exc}", file=sys.stderr)
        return False
    refused = summary["uploaded"].get("sources_refused")
    if refused:
        print(f"boundary export-fn: no source lines on the server: {refused}", file=sys.stderr)
    return True
