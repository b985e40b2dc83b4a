"""Ranks that average arrays of different lengths: each prints how long its call took
to raise, and the message.

    mpiexec -n N python mismatch_job.py COUNT TOKEN

Rank r averages COUNT + r float32 elements; then, to show that the team still works,
every rank averages the same array. Prints "rank R raised after S s: MESSAGE" and
"rank R then averaged to A". TOKEN is only there for the test's process search.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import ml_comm as mc


def main() -> int:
    count = int(sys.argv[1])
    mc.init(2, 1, 1 << 20)
    rank = mc.get_rank()
    start = time.monotonic()
    try:
        mc.average(np.ones(count + rank, np.float32))
        print(f"rank {rank} did not raise", flush=True)
    except mc.MLCommError as e:
        print(f"rank {rank} raised after {time.monotonic() - start:.3f} s: {e}", flush=True)
    a = np.full(1000, float(rank), np.float32)
    mc.average(a)
    print(f"rank {rank} then averaged to {a[0]}", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
