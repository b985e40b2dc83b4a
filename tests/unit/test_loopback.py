"""The C core's algorithms and agreement exchange at 1-12 and 16 ranks without MPI.

tests/c/loopback_test.c runs ranks as threads of one process over the loopback transport
(csrc/transport/loopback.c): every algorithm of the table for every dtype, op, a range of counts
(0, 1, n-1, n, n+1, odd, large) and one or two segments per call, compared exactly and bit for bit
across ranks; the ring with bf16 and fp16 on the wire (exact on small integers, 16-bit results
alike on every rank on other values, fp16 overflow failing on every rank); broadcast from every
root; the agreement exchange (agreement, a mismatch naming the rank, direct allreduces exact
and bit-identical on every rank, ranks whose compression differs, each setting of the plan and
of config_team's schedule named with its values and ranks, the stop flag, NaN/Inf counts, a
kind whose sizes vary by rank, at most 2 ceil(log2 n) messages per rank where the ranks agree,
a late rank and a rank whose inputs come late named by every waiting rank's stall warning, the
call rule: ranks behind the furthest call fail naming how far, the furthest check again and the
ranks realign) and an exchange whose send fails leaving no receive posted; the transport refuses
tags that MPI would. At 33-256 ranks (past the 64 requests an MPI call once tested at a time):
every failure path of the agreement and its happy path. Built with the
system C compiler from the layers it uses, none of which includes MPI, and also under
AddressSanitizer (1-6 ranks). ML_COMM_LONG_TESTS=1 runs both builds at every count 1-16.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
# The layers below the team layer: none of them may need MPI.
LAYERS = ("base", "transport", "algos", "agree", "plan")
MPI_ONLY = {"mpi.c", "mpi_error.c"}


def sources() -> list[str]:
    files = [p for layer in LAYERS for p in sorted((CSRC / layer).glob("*.c"))]
    return [str(p) for p in files if p.name not in MPI_ONLY]


def build(out: Path, *flags: str) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    cmd = [cc, "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror", "-pthread",
           f"-I{CSRC}", f"-I{CSRC / 'include'}", *flags,
           str(ROOT / "tests/c/loopback_test.c"), *sources(), "-lm", "-o", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


# Threads of ranks past the 2 cores make each count costlier than the last: the plain
# build took 27 s at 1-8 ranks, 59 s at 1-12, 68 s at 1-12 and 16, 108 s at 1-16 here,
# and the sanitized one 4 times as long as the plain. So the plain build covers 9-12 and
# 16 (a power of two past 8) in CI, the sanitized one 1-6; ML_COMM_LONG_TESTS=1 runs both
# at 1-16. The quick tier (tools/dev.py check) sets ML_COMM_QUICK_TESTS=1: the plain build
# at 1-8 ranks (and it leaves the sanitized one out).
LONG = os.environ.get("ML_COMM_LONG_TESTS") == "1"
ASAN_RANKS = ("16",) if LONG else ("6",)
PLAIN_RANKS = (
    ("16",) if LONG else ("8",) if os.environ.get("ML_COMM_QUICK_TESTS") == "1" else ("12", "16")
)


@pytest.mark.parametrize(
    "flags, ranks",
    # The sanitized build cuts the rings' blocks into 40-byte pieces, so that the tests'
    # small blocks take the pipelined rings' many pieces too.
    [
        (("-O2",), PLAIN_RANKS),
        (
            ("-O1", "-g", "-fsanitize=address,undefined", "-DMLC_RING_PIECE_BYTES=40"),
            ASAN_RANKS,
        ),
    ],
    ids=["plain", "asan"],
)
def test_algorithms_and_agreement_on_loopback(tmp_path, flags, ranks):
    exe = build(tmp_path / "loopback_test", *flags)
    run = subprocess.run(
        [str(exe), *ranks], capture_output=True, text=True, timeout=600,
        env={"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "halt_on_error=1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    said = ", ".join([f"1-{ranks[0]}", *ranks[1:]])
    assert f"{said} ranks," in run.stdout and "0 failures: ok" in run.stdout


def test_agreement_past_33_ranks_on_loopback(tmp_path):
    """The agreement at 2, 33, 34, 64, 65, 128 and 256 ranks as threads: its happy path
    (at most 2 ceil(log2 n) messages per rank and request, a direct sum exact), a mismatch
    named, bad arguments, NaN/Inf, ranks at different calls realigning, rings sent ahead
    completed after a mismatch (the table's pairwise windows), MPI's tag limit."""
    exe = build(tmp_path / "loopback_test", "-O2")
    sizes = ["2", "33", "34", "64", "65", "128", "256"]
    run = subprocess.run([str(exe), "scale", *sizes], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "loopback_test scale: 256 ranks done" in run.stdout
    assert "0 failures: ok" in run.stdout
