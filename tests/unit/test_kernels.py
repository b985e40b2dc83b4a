"""The reduction kernels bit for bit against reference arithmetic (tests/c/kernels_test.c),
built with the CPU-dispatched loops (the widest this CPU has) and with the baseline ones:
ranks on nodes with different vector units must get the same bits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"


@pytest.mark.parametrize("flags", [(), ("-DMLC_NO_CLONES",)], ids=["dispatched", "baseline"])
def test_kernels_match_reference_bits(tmp_path, flags):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "kernels_test"
    cmd = [cc, "-O3", "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{CSRC}",
           f"-I{CSRC / 'include'}", *flags, str(ROOT / "tests/c/kernels_test.c"),
           str(CSRC / "base/reduce.c"), str(CSRC / "base/reduce_ops.c"), str(CSRC / "base/dtype.c"),
           "-o", str(exe)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "0 failures: ok" in run.stdout, run.stdout + run.stderr
