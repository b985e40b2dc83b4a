"""A rank that reports the cores its threads may run on, after ml_comm started its own.

    mpiexec -n N python thread_cores_job.py NTHREADS TOKEN

After init (NTHREADS threads per team, one team) and one average that runs on the team's
threads (ML_COMM_INLINE_BYTES=0 keeps blocking calls off the caller's thread), it prints
"rank R main CORES before CORES", the calling thread's Cpus_allowed_list after init and
before it, and "rank R team CORES1;CORES2;..." for every thread init started (named
ml_comm-w<i> by the core), or "rank R raised: MESSAGE" when init fails. TOKEN is only
there for the test's process search.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np

import ml_comm as mc

TASKS = Path("/proc/self/task")


def allowed(tid: int | str) -> str:
    """A thread's Cpus_allowed_list, as Linux writes it ("0-1")."""
    for line in (TASKS / str(tid) / "status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise RuntimeError(f"no Cpus_allowed_list for thread {tid}")


def main() -> int:
    nthreads = int(sys.argv[1])
    rank = mc.get_rank()  # MPI is up from here: its own threads started already
    me = threading.get_native_id()
    before_threads, before_cores = set(os.listdir(TASKS)), allowed(me)
    try:
        mc.init(nthreads, 1, 4096)
    except mc.MLCommError as e:
        print(f"rank {rank} raised: {e}", flush=True)
        return 0
    a = np.full(1_000_000, float(rank), np.float32)  # a ring's size, not recursive doubling's
    mc.average(a)
    started = sorted(set(os.listdir(TASKS)) - before_threads)
    names = {t: (TASKS / t / "comm").read_text().strip() for t in started}
    team = [t for t in started if names[t].startswith("ml_comm-w")]
    print(f"rank {rank} main {allowed(me)} before {before_cores}", flush=True)
    print(f"rank {rank} team {';'.join(allowed(t) for t in team)}", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
