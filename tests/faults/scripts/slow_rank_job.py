"""A NumPy training loop in which one rank is slower every step.

    mpiexec -n N python slow_rank_job.py MODE SLOW TOKEN

Every step "computes" for STEP_SECONDS (a sleep, so that the ranks do not compete for
the machine's few cores) and averages a gradient; rank SLOW sleeps EXTRA_SECONDS more in
every step, so the others wait for it in every reduction.

MODE:
  slow        rank SLOW is slower every step, then every rank finalizes
  even        no rank is slower (SLOW is ignored)
  slow_raise  as slow, then rank 1 raises an uncaught exception instead of finalizing
              (finalize then runs at exit, after the exception hook)
Every rank prints "started rank R pid P" first and "done rank R" before it finalizes.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import ml_comm as mc

STEPS = 50
STEP_SECONDS = 0.02
EXTRA_SECONDS = 0.04  # 2 s over the job: well above the report's 1 s floor


def main() -> int:
    mode, slow = sys.argv[1], int(sys.argv[2])
    mc.init(1, 1, 4096)
    rank = mc.get_rank()
    print(f"started rank {rank} pid {os.getpid()}", flush=True)
    weights = np.zeros(1000, np.float32)
    mc.broadcast([weights])  # every rank starts from rank 0's weights
    for step in range(STEPS):
        time.sleep(STEP_SECONDS + (EXTRA_SECONDS if mode != "even" and rank == slow else 0.0))
        (avg,) = mc.gradients([np.full(weights.shape, step, np.float32)])
        weights -= avg
    print(f"done rank {rank}", flush=True)
    if mode == "slow_raise" and rank == 1:
        raise RuntimeError("injected failure on rank 1 after training")
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
