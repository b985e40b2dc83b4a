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
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.prefix) / "bin"


def print_stacks(binary: Path) -> None:
    """Every thread's stack in each running process of `binary` (gdb): where a run that
    passed its time limit waits."""
    gdb = shutil.which("gdb")
    if gdb is None:
        print("no gdb: the stacks of the run past its limit are not shown", flush=True)
        return
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or Path(os.readlink(proc / "exe")) != binary:
                continue
        except OSError:  # gone, or not ours to read
            continue
        print(f"--- process {proc.name}: every thread's stack", flush=True)
        show = [gdb, "-p", proc.name, "-batch", "-nx", "-ex", "thread apply all bt"]
        try:
            subprocess.run(show, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            print(f"gdb took more than 120 s on process {proc.name}", flush=True)


def run_ranks(run: list[str], env: dict, binary: Path, limit: float) -> int:
    """The job's exit status; 124 past `limit` seconds, after each rank's stacks."""
    job = subprocess.Popen(run, env=env, start_new_session=True)
    try:
        return job.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"past {limit:.0f} s: the ranks' stacks, then the job is killed", flush=True)
        print_stacks(binary)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        return 124


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sanitizer", choices=["thread", "address"], default="thread")
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("--cflags", default="", help="extra compiler flags (e.g. -D...)")
    ap.add_argument("--limit", type=float, default=300, help="seconds per run (300)")
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
        rc = run_ranks(run, env, out, args.limit)
        if rc != 0:
            failed.append(f"n={n} (exit {rc})")
    print(f"{args.sanitizer} sanitizer: " + ("FAILED " + ", ".join(failed) if failed else "clean"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
