"""The artifact page's target form as a person without JavaScript meets it: the targets
ticked before "Compile for the chosen targets" are still the ticked ones on the page that
comes back (after the redirect, and when the compile is refused), and the sentence above
the boxes says which targets accept the function, not whether its memory fits them (the
"Does it fit?" section below answers that)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from workers.protocol import TARGET_IDS

pytestmark = [pytest.mark.anyio]

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _forward(x: Any, w: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(x @ w)


@pytest.fixture(scope="module")
def exported() -> bytes:
    """A small function exported for the CPU, CUDA and TPU, on one device."""
    from workers.cli.export_fn import export_function

    platforms = ["cpu", "cuda", "tpu"]
    data, _ = export_function(_forward, [("float32", (8, 16)), ("float32", (16, 4))], platforms)
    return data


async def _upload(client: httpx.AsyncClient, data: bytes) -> str:
    r = await client.post(
        "/api/v1/artifacts",
        params={"kind": "exported"},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 201, r.text
    sha: str = r.json()["sha256"]
    return sha


def ticked(page: str) -> list[str]:
    """The target boxes the page shows ticked, in its order."""
    boxes = re.findall(r'<input type="checkbox" name="target" value="([^"]+)"( checked)?>', page)
    assert boxes, "no target boxes on the page"
    return [value for value, checked in boxes if checked]


async def test_the_ticked_targets_stay_ticked_after_compiling(
    client: httpx.AsyncClient, exported: bytes
) -> None:
    sha = await _upload(client, exported)
    first = (await client.get(f"/artifacts/{sha}")).text
    assert ticked(first) == ["v6e:2x4", "b200:8", "h100:8"]  # the one button's targets
    body = "target=v6e:2x2&target=h200:1"
    r = await client.post(f"/artifacts/{sha}/compile", content=body, headers=FORM)
    assert r.status_code == 303, r.text
    after = await client.get(r.headers["location"])
    assert after.status_code == 200
    assert ticked(after.text) == ["v6e:2x2", "h200:1"]
    assert 'data-target="v6e:2x2"' in after.text and 'data-target="h200:1"' in after.text


async def test_a_refused_compile_keeps_the_ticked_targets(
    client: httpx.AsyncClient, exported: bytes
) -> None:
    sha = await _upload(client, exported)
    body = "target=v6e:4x4&target=v7x:1"  # no such target: nothing is queued
    r = await client.post(f"/artifacts/{sha}/compile", content=body, headers=FORM)
    assert r.status_code == 422
    assert "Not queued: the server refused this compile." in r.text
    assert ticked(r.text) == ["v6e:4x4"]
    assert (await client.get("/api/v1/jobs")).json()["count"] == 0


async def test_the_target_count_is_not_a_memory_claim(
    client: httpx.AsyncClient, exported: bytes
) -> None:
    sha = await _upload(client, exported)
    page = (await client.get(f"/artifacts/{sha}")).text
    assert "It fits" not in page
    every = len(TARGET_IDS)  # every TPU generation's slices and every GPU host
    assert f"{every} targets accept it: it was exported for cpu, cuda, tpu and 1 device." in page
    assert "Does it fit?" in page
