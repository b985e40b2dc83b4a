"""A small NumPy data-parallel training (a two-layer perceptron, plain SGD) whose
gradients are averaged by ml_comm; prints a digest of the final weights.

    mpiexec -n N python train_job.py STEPS CHUNK_BYTES TOKEN

Each rank draws its own batches (seeded by rank), so the gradients are non-integer
float32 values whose sum depends on the order of additions. Prints, per rank,
"rank R weights <sha256 of every weight's bytes>" and "rank R differing ranks D"
(check_buffers_match). TOKEN is only there for the test's process search.
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

import ml_comm as mc

SIZES = (64, 300, 10)  # inputs, hidden units, classes: 22,510 parameters


def grads_of(w1, b1, w2, b2, x, y):
    h = np.maximum(x @ w1 + b1, 0)
    logits = h @ w2 + b2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    d = p
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    gw2, gb2 = h.T @ d, d.sum(axis=0)
    dh = (d @ w2.T) * (h > 0)
    return [x.T @ dh, dh.sum(axis=0), gw2, gb2]


def main() -> int:
    steps, chunk_bytes = int(sys.argv[1]), int(sys.argv[2])
    # Small segments, two threads and low thresholds, so that the three calls below take
    # three paths of the core: the ring on the team's threads (each block summed around
    # the ring), recursive doubling, and the direct allreduce (inputs summed in rank order).
    os.environ.update(
        ML_COMM_DIRECT_BYTES="256", ML_COMM_LATENCY_BYTES="2048", ML_COMM_INLINE_BYTES="8192"
    )
    mc.init(2, 1, 1 << 16, chunk_bytes=chunk_bytes)
    rank = mc.get_rank()
    init = np.random.default_rng(1234)  # the same start on every rank
    n_in, n_hidden, n_out = SIZES
    weights = [
        (init.standard_normal((n_in, n_hidden)) * 0.1).astype(np.float32),
        np.zeros(n_hidden, np.float32),
        (init.standard_normal((n_hidden, n_out)) * 0.1).astype(np.float32),
        np.zeros(n_out, np.float32),
    ]
    assert mc.check_buffers_match(weights, 1) == 0  # the shared seed's start, checked
    data = np.random.default_rng(100 + rank)
    for _ in range(steps):
        x = data.standard_normal((32, n_in)).astype(np.float32)
        y = data.integers(0, n_out, 32)
        gw1, gb1, gw2, gb2 = grads_of(*weights, x, y)
        gw1, gw2 = mc.gradients([gw1, gw2])  # 88,800 bytes: the ring
        (gb1,) = mc.gradients([gb1])  # 1,200 bytes: recursive doubling
        (gb2,) = mc.gradients([gb2])  # 40 bytes: direct
        for w, g in zip(weights, [gw1, gb1, gw2, gb2]):
            w -= np.float32(0.05) * g
    digest = hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest()
    print(f"rank {rank} weights {digest}", flush=True)
    print(f"rank {rank} differing ranks {mc.check_buffers_match(weights, 0)}", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
