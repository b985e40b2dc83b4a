"""Runs an example under mpiexec for the example tests, with a hard timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.prefix) / "bin" / "mpiexec"
TIMEOUT_S = 300


def run_example(
    name: str,
    *args: str,
    nranks: int = 2,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """stdout of examples/<name> at `nranks`; fails on a non-zero exit or past TIMEOUT_S.

    On a timeout mpiexec gets SIGTERM first, on which it ends its proxy and the ranks (they
    run in process groups of their own), and SIGKILL only if that did not end it.
    """
    cmd = [str(MPIEXEC), "-n", str(nranks), sys.executable, str(ROOT / "examples" / name), *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"{name} did not finish in {TIMEOUT_S} s:\n{out}{err}")
    assert proc.returncode == 0, out + err
    return out
