"""The Python layers (docs/developer.md): the NumPy API runs without importing any
framework; a framework comes in only through its backend, when init names it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ml_comm"
FRAMEWORKS = ("tensorflow", "keras", "ml_comm.tensorflow", "ml_comm.keras")

SCRIPT = """
import sys
import numpy as np
import ml_comm as mc

mc.init(1, 1, 16)
out = mc.gradients([np.arange(3, dtype=np.float32), np.float64(2)])
mc.broadcast([np.zeros(2)])
assert mc.check_buffers_match(np.int64(1)) == 0
mc.finalize()
assert out[0].tolist() == [0, 1, 2] and out[1] == 2, out
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")
                or m.startswith(("ml_comm.tensorflow", "ml_comm.keras")))
print("frameworks loaded:", loaded)
assert not loaded
"""


def test_numpy_session_loads_no_framework(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, run.stdout + run.stderr


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "ml_comm." + node.module if node.level and node.module else node.module or ""
            names.update(f"{base}.{a.name}".lstrip(".") for a in node.names)
            names.add(base)
    return names


def test_session_and_numpy_layers_import_no_framework():
    for name in (
        "api.py",
        "session.py",
        "backend.py",
        "numpy_backend.py",
        "reductions.py",
        "broadcasts.py",
        "_requests.py",
        "_buffers.py",
    ):
        imported = _imports(PACKAGE / name)
        bad = {m for m in imported for f in FRAMEWORKS if m == f or m.startswith(f + ".")}
        bad |= {m for m in imported if m.endswith((".tensorflow", ".keras"))}
        assert not bad, f"{name} imports {bad}"
