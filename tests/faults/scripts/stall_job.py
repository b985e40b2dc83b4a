"""A rank that does not come to a team operation: the others' stall watchdog names it.

    mpiexec -n N python stall_job.py MODE SECONDS TOKEN

MODE (what the last rank does while the others call gradients()):
  sleep    sleeps SECONDS before its own gradients() call, the job's second (a slow or
           stuck rank)
  stop     stops itself (SIGSTOP) SECONDS into a run of large reductions, so that it
           halts mid-operation, after the others have reached it (a hung node)
Every rank prints "done rank R, average A" at the end (mode sleep); the stall limits
come from the environment (ML_COMM_STALL_WARN_SECONDS, ML_COMM_STALL_ABORT_SECONDS).
TOKEN is only there so that the test can find this job's processes in /proc.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np

import ml_comm as mc

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")


def main() -> int:
    mode, seconds = sys.argv[1], float(sys.argv[2])
    mc.init(1, 1, 1 << 20)
    rank, n = mc.get_rank(), mc.get_nranks()
    print(f"started rank {rank} pid {os.getpid()}", flush=True)
    late = rank == n - 1
    if mode == "sleep":
        # A first call on every rank: it imports what gradients needs, seconds for each of
        # 64 ranks on 2 cores, which would come off the late rank's lead over the others.
        mc.gradients([np.zeros(10, np.float32)])
        if late:
            time.sleep(seconds)
        out = mc.gradients([np.full(10, float(rank), np.float32)])
        print(f"done rank {rank}, average {out[0][0]}", flush=True)
    elif mode == "stop":
        if late:
            threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGSTOP)).start()
        grads = [np.ones(4 << 20, np.float32)]
        deadline = time.monotonic() + 120  # the abort ends the job long before
        while time.monotonic() < deadline:
            mc.gradients(grads)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
