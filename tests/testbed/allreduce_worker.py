"""Exact allreduce check, one rank per test-bed node (run by test_testbed.py under srun).

Every input element is an integer-valued number chosen from the rank and the index, so the
expected sum and average of every element are known exactly (the nccl-tests way). Each
rank prints one line ``RESULT {json}`` with its rank, host, the payload bytes it reduced
and every mismatch it found (first few elements of each); exit status 1 on any mismatch.

    srun -N 2 --ntasks-per-node=1 --mpi=pmi2 .venv/bin/python tests/testbed/allreduce_worker.py
"""

from __future__ import annotations

import json
import socket
import sys

import ml_dtypes
import numpy as np

import ml_comm as mc

DTYPES = [
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.float16),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.int32),
    np.dtype(np.int64),
]
# Element counts: tiny, odd, around the latency/inline thresholds, and one well above a
# few MiB (3,000,001 float32 = 11.4 MiB; float64 = 22.9 MiB) that takes the pipelined ring.
COUNTS = [1, 7, 1000, 65537, (1 << 20) + 3, 3_000_001]
# The largest exactly representable integer span per dtype for a sum over a few ranks.
SPAN = {np.dtype(np.float16): 61, np.dtype(ml_dtypes.bfloat16): 31}


def values(dtype: np.dtype, count: int, rank: int) -> np.ndarray:
    """Rank `rank`'s integer-valued input (negative values included), as int64."""
    span = SPAN.get(dtype, 2039)
    i = np.arange(count, dtype=np.int64)
    return (i * 7 + rank * 13) % span - span // 2


def expected(dtype: np.dtype, count: int, nranks: int, average: bool) -> np.ndarray:
    total = sum(values(dtype, count, r) for r in range(nranks))
    if not average:
        return total.astype(dtype)
    if dtype.kind == "i":  # integer averages truncate toward zero
        return (np.sign(total) * (np.abs(total) // nranks)).astype(dtype)
    return (total.astype(np.float64) / nranks).astype(dtype)


def mismatch(what: str, got: np.ndarray, want: np.ndarray) -> dict | None:
    # Compare the bits, not the values (-0.0 == 0.0 would hide a wrong sign).
    bad = np.flatnonzero(
        (got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")).reshape(-1)
    )
    if bad.size == 0:
        return None
    k = bad[:5]
    return {
        "what": what,
        "wrong": int(bad.size),
        "index": k.tolist(),
        "got": got.reshape(-1)[k].astype(np.float64).tolist(),
        "want": want.reshape(-1)[k].astype(np.float64).tolist(),
    }


def main() -> int:
    mc.init(2, 1, 1 << 20)
    rank, nranks = mc.get_rank(), mc.get_nranks()
    errors = []
    payload = 0  # bytes this rank reduced, summed over the calls
    for dtype in DTYPES:
        for count in COUNTS:
            x = values(dtype, count, rank).astype(dtype)
            mc.allreduce_sum(x)
            payload += x.nbytes
            err = mismatch(
                f"allreduce_sum {dtype.name}[{count}]", x, expected(dtype, count, nranks, False)
            )
            if err:
                errors.append(err)
    # gradients(): a list of mixed dtypes and shapes, averaged, inputs untouched.
    shapes = [(3, 5), (1000,), (257, 1031), ()]
    grads, wants = [], []
    for k, shape in enumerate(shapes):
        dtype = DTYPES[k % len(DTYPES)]
        count = int(np.prod(shape))
        grads.append(values(dtype, count, rank).astype(dtype).reshape(shape))
        wants.append(expected(dtype, count, nranks, True).reshape(shape))
    inputs = [g.copy() for g in grads]
    out = mc.gradients(grads)
    payload += sum(g.nbytes for g in grads)
    for k, (got, want) in enumerate(zip(out, wants)):
        if got.shape != want.shape or got.dtype != want.dtype:
            errors.append({"what": f"gradients[{k}]", "shape": [got.shape, want.shape]})
            continue
        err = mismatch(f"gradients[{k}] {got.dtype.name}{list(got.shape)}", got, want)
        if err:
            errors.append(err)
        if not np.array_equal(grads[k], inputs[k]):
            errors.append({"what": f"gradients[{k}]: the input was modified"})
    print(
        "RESULT "
        + json.dumps(
            {
                "rank": rank,
                "nranks": nranks,
                "host": socket.gethostname(),
                "payload_bytes": payload,
                "errors": errors,
                "settings": mc.team_settings(0),
            },
            default=str,
        ),
        flush=True,
    )
    mc.finalize()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
