"""examples/torch_ddp.py, as docs/torch.md tells to run it: 2 ranks, every rank ending
with the same weights (the script asserts it). Plain pytest: it launches mpiexec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec beside {sys.executable}")
def test_torch_ddp_example(tmp_path):
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-P", ROOT / "examples" / "torch_ddp.py"]
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 ranks: last loss" in done.stdout
