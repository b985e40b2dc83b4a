"""A NumPy training loop that stops on a signal that only one rank receives.

    mpiexec -n N python stop_job.py SIGNAL VICTIM STEP KSTEPS TOKEN

Rank VICTIM sends itself SIGNAL (a real signal, through the handler that
ml_comm.catch_stop_signals installed) after its step STEP; every rank asks
should_stop() after every step and stops when it says so. KSTEPS < 0: the team is
pipelined (config_team(0, 0, 0, max_steps)). Prints "started rank R pid P", then
"rank R stopped after step S (signals: ...)" or "rank R ran all steps", and the
final weights' checksum, so that the test can check that every rank stopped at
the same step with the same weights. TOKEN is only there for the process search.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import ml_comm as mc
from ml_comm.faults import stop

STEPS = 2000  # a missed stop runs for many seconds: the test sees it


def main() -> int:
    signame, victim, fire_step, ksteps = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    mc.init(1, 1, 4096)
    if ksteps < 0:
        mc.config_team(0, 0, 0, STEPS)
    mc.catch_stop_signals()
    rank, n = mc.get_rank(), mc.get_nranks()
    print(f"started rank {rank} pid {os.getpid()}", flush=True)
    weights = np.zeros(1000, np.float32)
    mc.broadcast([weights])  # every rank starts from rank 0's weights
    stopped = None
    for step in range(STEPS):
        grad = np.full(weights.shape, rank + step % 7, np.float32)
        (avg,) = mc.gradients([grad])
        weights -= avg
        if rank == victim and step == fire_step:
            os.kill(os.getpid(), getattr(signal, signame))
        if mc.should_stop():
            stopped = step
            break
        time.sleep(0.002)
    checksum = float(np.float64(weights).sum())
    got = ",".join(stop.received_signals()) or "none"
    if stopped is None:
        print(f"rank {rank} ran all steps", flush=True)
    else:
        print(f"rank {rank} stopped after step {stopped} (signals: {got})", flush=True)
    print(f"rank {rank} of {n} weights {checksum!r}", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
