#!/usr/bin/env python3
"""Build tests/c/threads_test.c with the core's sources under a sanitizer and run it
under mpiexec at 2, 3 and 4 ranks.

    .venv/bin/python tools/sanitizers.py                  # ThreadSanitizer
    .venv/bin/python tools/sanitizers.py --sanitizer address

Reports from inside libmpi are suppressed (tools/tsan.supp says why); any report
from ml_comm's own code fails the run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.prefix) / "bin"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sanitizer", choices=["thread", "address"], default="thread")
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("--cflags", default="", help="extra compiler flags (e.g. -D...)")
    args = ap.parse_args()
    sources = [p for p in ROOT.glob("csrc/*/*.c") if p.name != "loopback.c"]
    out = Path(tempfile.mkdtemp(prefix="ml_comm-san-")) / "threads_test"
    cmd = [
        str(BIN / "mpicc"),
        f"-fsanitize={args.sanitizer}",
        "-g",
        "-O1",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Werror",
        "-pthread",
        "-DMLC_PTHREAD_CREATE=mlc_test_pthread_create",  # the test can fail a thread's start
        *args.cflags.split(),
        f"-I{ROOT / 'csrc'}",
        f"-I{ROOT / 'csrc/include'}",
        str(ROOT / "tests/c/threads_test.c"),
        *map(str, sources),
        "-o",
        str(out),
    ]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    env = dict(os.environ)
    # UCX hooks mmap/madvise for its memory cache; those hooks crash under
    # TSan (seen: ucm_madvise in a new thread). The cache is an optimisation only.
    env["UCX_MEM_EVENTS"] = "no"
    env["TSAN_OPTIONS"] = f"suppressions={ROOT / 'tools/tsan.supp'} halt_on_error=1 exitcode=66"
    env["ASAN_OPTIONS"] = "detect_leaks=1 exitcode=66"
    env["LSAN_OPTIONS"] = f"suppressions={ROOT / 'tools/lsan.supp'}"
    failed = []
    for n in args.ranks.split(","):
        run = [str(BIN / "mpiexec"), "-n", n, str(out)]
        print("+", " ".join(run), flush=True)
        try:
            rc = subprocess.run(run, env=env, timeout=300).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if rc != 0:
            failed.append(f"n={n} (exit {rc})")
    print(f"{args.sanitizer} sanitizer: " + ("FAILED " + ", ".join(failed) if failed else "clean"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
