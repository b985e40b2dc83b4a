"""A rank of a job whose ranks may have been started with different settings.

    mpiexec -n 1 [-env NAME VALUE] python settings_job.py \
        NTHREADS NTEAMS MSGLEN CHUNK FRAMEWORK TOKEN : ...

Each rank calls init with its own arguments (CHUNK 0: the default, or
ML_COMM_CHUNK_BYTES) under its own environment (mpiexec's per-program -env), and
prints "rank R raised after S s: MESSAGE" when init fails, else "rank R averaged
to A" after one average. TOKEN is only there for the test's process search.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import ml_comm as mc


def main() -> int:
    nthreads, nteams, msglen, chunk = (int(a) for a in sys.argv[1:5])
    framework = sys.argv[5]
    rank = mc.get_rank()
    start = time.monotonic()
    try:
        mc.init(nthreads, nteams, msglen, framework, chunk_bytes=chunk or None)
    except mc.MLCommError as e:
        print(f"rank {rank} raised after {time.monotonic() - start:.3f} s: {e}", flush=True)
        print(f"rank {rank} raised {type(e).__name__}", flush=True)
        return 0
    a = np.full(1000, float(rank), np.float32)
    mc.average(a)
    print(f"rank {rank} averaged to {a[0]}", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
