"""The libtpu dump child kept between compiles (workers/xla_targets/dump_server.py): one
process for many compiles, each compile's dumps and only its own in the request's folders,
the same bundles as a fresh child's, and a fresh child after a death, a timeout, an
environment change or the parent's end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from workers.xla_targets.dump_child import compile_in_child, export_program, placement_of
from workers.xla_targets.dump_server import SET_ON_IMPORT, KeptChild
from workers.xla_targets.tpu_dump import LIBTPU_DUMP_FLAGS, _libtpu_flags, read_llo

ROOT = Path(__file__).resolve().parents[2]


def _program(n: int) -> tuple[bytes, Any]:
    """A jitted n×n matmul exported for TPU, and its placement on one v6e chip."""
    import jax
    import jax.numpy as jnp

    from workers.protocol import parse_target
    from workers.xla_targets.topology import target_devices

    device = target_devices(parse_target("v6e:1x1"))[0]
    x = jax.ShapeDtypeStruct((n, n), jnp.float32)
    exported = export_program(jax.jit(lambda a, b: jnp.tanh(a @ b)), [x, x], "tpu")
    return exported, placement_of("v6e:1x1", None, device)


def _dumps(folder: Path) -> dict[str, Path]:
    return {"mosaic": folder / "mosaic", "llo": folder / "llo"}


def _bundles(folder: Path) -> dict[str, str]:
    return read_llo(folder / "llo", 10_000_000, passes=False).bundles


@pytest.fixture(scope="module")
def kept() -> Any:
    """One kept child for the tests that leave it running (each start costs about 2 s)."""
    child = KeptChild(("mosaic", "llo"), _libtpu_flags)
    yield child
    child.close()


def _pid(child: KeptChild) -> int:
    proc = child._proc  # which process answered is what is under test
    assert proc is not None
    return proc.pid


def test_one_process_compiles_many_and_each_gets_only_its_own_dumps(
    kept: KeptChild, tmp_path: Path
) -> None:
    small, place = _program(128)
    large, _ = _program(256)
    first = kept.compile(small, place, tmp_path / "a", _dumps(tmp_path / "a"))
    pid = _pid(kept)
    second = kept.compile(large, place, tmp_path / "b", _dumps(tmp_path / "b"))
    again = kept.compile(small, place, tmp_path / "c", _dumps(tmp_path / "c"))
    assert _pid(kept) == pid
    assert all(c.compile_s is not None and c.compile_s > 0 for c in (first, second, again))
    a, b, c = (_bundles(tmp_path / x) for x in "abc")
    assert a and b and a == c  # the same program, the same bundles, twice
    assert a != b  # the second request's files are its own: a 256² matmul schedules otherwise
    names = [sorted(p.name for p in (tmp_path / x / "llo").iterdir()) for x in "ac"]
    assert len(names[0]) == len(names[1])  # nothing of an earlier compile carried over


def test_the_bundles_are_a_fresh_childs(kept: KeptChild, tmp_path: Path) -> None:
    exported, place = _program(128)
    kept.compile(exported, place, tmp_path / "kept", _dumps(tmp_path / "kept"))
    dirs = _dumps(tmp_path / "fresh")
    flags = LIBTPU_DUMP_FLAGS.format(mosaic=dirs["mosaic"], llo=dirs["llo"])
    compile_in_child(exported, place, tmp_path / "fresh", {"LIBTPU_INIT_ARGS": flags})
    assert _bundles(tmp_path / "kept") == _bundles(tmp_path / "fresh") != {}


def test_a_failed_compile_is_reported_and_the_child_stays(kept: KeptChild, tmp_path: Path) -> None:
    exported, place = _program(128)
    kept.compile(exported, place, tmp_path / "a", _dumps(tmp_path / "a"))
    pid = _pid(kept)
    with pytest.raises(RuntimeError, match="the dump compile failed: "):
        kept.compile(b"not an export", place, tmp_path / "b", _dumps(tmp_path / "b"))
    kept.compile(exported, place, tmp_path / "c", _dumps(tmp_path / "c"))
    assert _pid(kept) == pid and _bundles(tmp_path / "c")


def test_a_dead_or_slow_child_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = KeptChild(("mosaic", "llo"), _libtpu_flags)
    try:
        _replaced(kept, tmp_path, monkeypatch)
    finally:
        kept.close()


def _replaced(kept: KeptChild, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exported, place = _program(128)
    kept.compile(exported, place, tmp_path / "a", _dumps(tmp_path / "a"))
    killed = _pid(kept)
    os.kill(killed, 9)
    kept._proc.wait()  # type: ignore[union-attr]  # died while idle, before the next request
    kept.compile(exported, place, tmp_path / "b", _dumps(tmp_path / "b"))
    assert _pid(kept) != killed and _bundles(tmp_path / "b")
    with pytest.raises(RuntimeError, match=r"ran past 0\.001 s and was stopped"):
        kept.compile(exported, place, tmp_path / "c", _dumps(tmp_path / "c"), timeout_s=0.001)
    assert kept._proc is None  # stopped, not left compiling
    import jax.experimental.mosaic.gpu  # noqa: F401 - sets SET_ON_IMPORT here, as a GPU compile does

    made = {name: os.environ[name] for name in SET_ON_IMPORT if name in os.environ}
    assert made, "importing Mosaic GPU set none of SET_ON_IMPORT"
    for name in made:
        monkeypatch.delenv(name)
    before = kept.compile(exported, place, tmp_path / "d", _dumps(tmp_path / "d"))
    pid = _pid(kept)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test")  # bookkeeping: the child stays
    for name, value in made.items():  # as if Mosaic GPU were imported only now: it stays too
        monkeypatch.setenv(name, value)
    kept.compile(exported, place, tmp_path / "d2", _dumps(tmp_path / "d2"))
    assert _pid(kept) == pid and _bundles(tmp_path / "d2")
    monkeypatch.setenv("BOUNDARY_TEST_SOMETHING_NEW", "1")  # a child starts from the new one
    kept.compile(exported, place, tmp_path / "e", _dumps(tmp_path / "e"))
    assert _pid(kept) != pid and before.compile_s is not None


def test_the_child_leaves_with_its_parent(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tests.workers.test_dump_server import _dumps, _program\n"
        "from workers.xla_targets.dump_server import KeptChild\n"
        "from workers.xla_targets.tpu_dump import _libtpu_flags\n"
        "kept = KeptChild(('mosaic', 'llo'), _libtpu_flags)\n"
        "exported, place = _program(128)\n"
        "folder = Path(sys.argv[1])\n"
        "kept.compile(exported, place, folder, _dumps(folder))\n"
        "print(kept._proc.pid)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "a")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    child = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the child reads its stdin's end, then leaves
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "zombie" in status.read_text(), (
        "the kept child outlived its parent"
    )


class _Chatty(KeptChild):
    module = "tests.workers.chatty_dump_child"


def test_what_a_library_prints_does_not_hide_the_answer(tmp_path: Path) -> None:
    """The answer comes in the same read as a library's lines, after one it did not end:
    it is found there, not waited for. A child that dies on a request is reported with its
    exit status, not sent the request again, and the next request gets a fresh child."""
    chatty = _Chatty(("llo",), lambda dirs: {"PYTHONPATH": str(ROOT)})
    exported, place = b"not compiled", placement_of("v6e:1x1", None, _Device())

    def compile_in(name: str) -> float | None:
        folder = tmp_path / name
        done = chatty.compile(exported, place, folder, {"llo": folder / "llo"}, timeout_s=60)
        return done.compile_s

    try:
        assert compile_in("a") == 0.25
        first = _pid(chatty)
        assert compile_in("b") == 0.25 and _pid(chatty) == first
        for name in "ab":
            assert (tmp_path / name / "llo" / "made.txt").read_text() == name
        with pytest.raises(RuntimeError, match=r"the dump compile failed \(exit 3\)"):
            compile_in("crash")
        assert compile_in("c") == 0.25 and _pid(chatty) != first
    finally:
        chatty.close()


class _Device:
    id = 0
