"""A training start-up that a mis-launch must stop: init, one average, finalize.

    [mpiexec -n N] python launch_job.py TOKEN [--killed-at-raise]

Prints "trained: rank R of N, average A" when init let it through.
TOKEN is only there so that the test can find this job's processes in /proc.
--killed-at-raise: the process ends the moment an exception escapes, before Python
prints its traceback, as a task does that the launcher kills when another task failed.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ml_comm as mc


def main() -> int:
    if "--killed-at-raise" in sys.argv:
        sys.excepthook = lambda *exc: os._exit(1)
    mc.init(1, 1, 1024)
    rank, n = mc.get_rank(), mc.get_nranks()
    value = mc.average(np.full(4, rank + 1.0, dtype=np.float32))[0]
    print(f"trained: rank {rank} of {n}, average {value}", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
