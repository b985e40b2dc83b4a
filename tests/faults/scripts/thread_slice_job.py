"""A rank that reports the time slices of the threads ml_comm started.

    mpiexec -n N python thread_slice_job.py NTHREADS TOKEN

After init (NTHREADS threads per team, one team) and one average that runs on the team's
threads (ML_COMM_INLINE_BYTES=0 keeps blocking calls off the caller's thread), it prints
"rank R slices S1,S2,..." with the se.slice (ns) of every thread that init started, from
/proc, or "rank R raised: MESSAGE" when init fails. TOKEN is only there for the test's
process search.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

import ml_comm as mc

TASKS = Path("/proc/self/task")


def slice_of(tid: str) -> str:
    """se.slice of a thread, or "none" where the kernel does not show one."""
    for line in (TASKS / tid / "sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return line.split(":")[1].strip()
    return "none"


def main() -> int:
    nthreads = int(sys.argv[1])
    rank = mc.get_rank()  # MPI is up from here: its own threads started already
    before = set(os.listdir(TASKS))
    try:
        mc.init(nthreads, 1, 4096)
    except mc.MLCommError as e:
        print(f"rank {rank} raised: {e}", flush=True)
        return 0
    a = np.full(1_000_000, float(rank), np.float32)  # a ring's size, not recursive doubling's
    mc.average(a)
    started = sorted(set(os.listdir(TASKS)) - before)
    print(f"rank {rank} slices {','.join(slice_of(t) for t in started)}", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
