"""The server process stays light: no JAX, no NumPy at start-up (app/ never imports jax)."""

from __future__ import annotations

import subprocess
import sys


def test_building_the_app_imports_neither_jax_nor_numpy(tmp_path: object) -> None:
    code = (
        "import sys, tempfile, pathlib\n"
        "from app.main import create_app\n"
        "from app.settings import Settings\n"
        "create_app(Settings(DB=pathlib.Path(tempfile.mkdtemp()) / 'db.sqlite3'))\n"
        "print(sorted(m for m in ('jax', 'jaxlib', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
