#!/usr/bin/env python3
"""An exactness check of ml_comm's reductions for any MPI ml_comm is installed on:

    <venv>/bin/mpiexec -n 2 <venv>/bin/python tools/mpi_exactness_check.py

gradients of two dtypes (float32 and float64, in one list), broadcast from two roots,
average, allreduce_sum and barrier, on integer-valued inputs whose results are known
exactly; compared bit for bit. Prints one line per rank and exits 1 on any difference.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ml_comm as mc

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")


def main() -> int:
    mc.init(2, 1, 1 << 16, chunk_bytes=4096)
    rank, n = mc.get_rank(), mc.get_nranks()
    wrong = []
    ramp = np.arange(30000)

    # gradients: each rank contributes 2 * (rank + 1) * i, so the average is (n + 1) * i.
    grads = [
        (2 * (rank + 1) * ramp).astype(np.float32),
        (2 * (rank + 1) * ramp[:777]).astype(np.float64),
    ]
    out = mc.gradients(grads)
    for got, dtype, length in zip(out, (np.float32, np.float64), (30000, 777)):
        want = ((n + 1) * ramp[:length]).astype(dtype)
        if got.dtype != dtype or not np.array_equal(got, want):
            wrong.append(f"gradients {np.dtype(dtype).name}")

    for root in {0, n - 1}:
        values = [np.full(1000, 10.0 * rank + 1, np.float32), np.full(3, rank, np.int64)]
        mc.broadcast(values, root)
        if not (np.all(values[0] == 10.0 * root + 1) and np.all(values[1] == root)):
            wrong.append(f"broadcast from root {root}")

    avg = mc.average((2 * (rank + 1) * ramp).astype(np.float32))
    if not np.array_equal(avg, ((n + 1) * ramp).astype(np.float32)):
        wrong.append("average")

    total = mc.allreduce_sum(((rank + 1) * ramp).astype(np.int64))
    if not np.array_equal(total, (n * (n + 1) // 2) * ramp):
        wrong.append("allreduce_sum int64")

    mc.barrier()
    library = " ".join(mc.version_info()["mpi_library"].splitlines()[0].split())
    print(f"rank {rank} of {n}: {'WRONG: ' + ', '.join(wrong) if wrong else 'exact'} ({library})")
    mc.finalize()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
