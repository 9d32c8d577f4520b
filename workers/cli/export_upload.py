"""`boundary export-fn --upload URL --target …` (URL may name a unix socket, `unix:PATH`):
the artifact (its source lines, the example's inputs and its output sample) posted to a
Boundary server, then one compile job per target and a jax-cpu run on those inputs checked
against the sample, each through the server's one admission like any other submission. The
source lines are extra: a server that refuses them (an older one) is named in the result,
and the rest goes on. The inputs are not: a run on other values than the sample's would
fail its check, so a refused inputs file stops the upload, saying what to do instead.

Light, like the export itself: the standard library and httpx only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workers.export.api_client import refusal_text
from workers.export.server_address import ServerAddress

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


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        yield from iter(lambda: handle.read(1 << 20), b"")


def post_file(client: Any, data: bytes | Path, kind: str) -> str:
    """Upload a file (its bytes, or a file on disk sent as it is read) to /api/v1/artifacts
    of `client`'s server (`ServerAddress.client`); its SHA-256 (ValueError naming the
    refusal)."""
    if isinstance(data, Path):
        size = data.stat().st_size
        content: bytes | Iterator[bytes] = _chunks(data)
    else:
        size, content = len(data), data
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    response = client.post(
        "/api/v1/artifacts", params={"kind": kind}, content=content, headers=headers
    )
    if response.status_code not in (200, 201):
        raise ValueError(f"the server refused the {kind} file ({refusal_text(response)})")
    digest: str = response.json()["sha256"]
    return digest


def post_inputs(client: Any, inputs: Path) -> str:
    """Upload the example's inputs; ValueError saying what to do when the server refuses
    them (over its upload cap, most likely: real weights are large), or when the
    connection breaks while they are sent."""
    import httpx

    try:
        return post_file(client, inputs, "npz")
    except httpx.TransportError as exc:
        why = f"the inputs file could not be sent ({type(exc).__name__}: {exc})"
    except ValueError as exc:
        why = str(exc)
    over = "(HTTP 413:" in why
    raise ValueError(
        f"{why}. The example's arrays are the runs' inputs ({inputs}, "
        f"{inputs.stat().st_size:,} bytes): give the large ones as jax.ShapeDtypeStruct in "
        "the example (they are then drawn), export with --generated-inputs to draw them all"
        + (", or raise the server's BOUNDARY_UPLOAD_MAX_BYTES" if over else "")
    )


def upload_all(
    server: ServerAddress,
    artifact: bytes,
    *,
    sources: bytes | None = None,
    sample: bytes | None,
    rules: dict[str, Any] | None,
    seed: int,
    targets: list[str],
    token: str | None,
    dims: dict[str, int] | None = None,
    inputs: Path | None = None,
) -> dict[str, Any]:
    """Post the files, then the jobs (a symbolic artifact's at the example's `dims`, its
    runs on `inputs` where given); what the server accepted (UploadRefused otherwise)."""
    done: dict[str, Any] = {"jobs": []}
    with server.client(token, timeout=120.0) as client:
        try:
            done["artifact"] = post_file(client, artifact, "exported")
            done["page"] = server.link(f"/artifacts/{done['artifact']}")
        except ValueError as exc:
            raise UploadRefused(str(exc), done) from None
        if sources is not None:
            try:
                done["sources"] = post_file(client, sources, "sources")
            except ValueError as exc:  # the lines are extra: say so, and go on
                done["sources_refused"] = str(exc)
        try:
            if inputs is not None:
                done["inputs"] = post_inputs(client, inputs)
            if sample is not None:
                done["reference"] = post_file(client, sample, "npz")
        except ValueError as exc:
            raise UploadRefused(str(exc), done) from None
        # A symbolic artifact's runs and compiles are at the example's values.
        at = {"dims": dims} if dims else {}
        params: dict[str, Any] = {"artifact": done["artifact"], "seed": seed, **at}
        if rules:
            params["input_rules"] = rules
        if "inputs" in done:
            params["inputs"] = done["inputs"]
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
            response = client.post("/api/v1/jobs", json=job)
            if response.status_code != 202:
                raise UploadRefused(f"the server refused {what} ({refusal_text(response)})", done)
            made = response.json()
            done["jobs"].append(
                {
                    "id": made["id"],
                    "path": job["path"],
                    "target": job.get("target"),
                    "page": server.link(f"/runs/{made['id']}"),
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
    inputs: Path | None = None,
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
            inputs=inputs,
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
