"""What one gradient's hand-over to a keyed group costs the thread that computes the
gradients (mlc_team_group_arrive_part, the call every hook makes per gradient during
backprop), with work between the arrivals as backprop has.

Each step opens a group of --tensors tensors (float32, 1,000 + 37 k elements) and hands
them over in a ResNet-like order: a weight, then a vector (the weights lead the core's
layout, the vectors close it, so every other arrival completes no prefix a lane waits
for), each after --work-us of busy work on this thread. Printed by rank 0: the median and
mean time of one arrival over the last steps, microseconds. Sums are checked.

    mpiexec -n 2 .venv/bin/python benchmarks/group_arrivals.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from ml_comm._core import ffi, lib

import ml_comm as mc
from ml_comm import api

GROUP_KEY = 1
FLOAT32 = 0  # the core's dtype code


def arrival_order(weights: int, vectors: int) -> list[int]:
    """Weights (layout 0..weights-1) and vectors (after them) taking turns."""
    order: list[int] = []
    for k in range(max(weights, vectors)):
        order += [k] if k < weights else []
        order += [weights + k] if k < vectors else []
    return order


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tensors", type=int, default=215)
    p.add_argument("--work-us", type=float, default=200.0)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    mc.init(2, 1, 64 * 1024 * 1024)
    handle = api.session().team(0)
    n, nranks = args.tensors, mc.get_nranks()
    sizes = [1000 + 37 * k for k in range(n)]
    counts = ffi.new("int64_t[]", sizes)
    err = ffi.new("char[]", 512)
    order = arrival_order((n + 1) // 2, n // 2)
    times: list[float] = []
    for step in range(1, args.warmup + args.steps + 1):
        arrays = [np.full(c, mc.get_rank() + 1, np.float32) for c in sizes]
        latch = lib.mlc_latch_create()
        opener = ffi.new("int64_t *")
        rc = lib.mlc_team_group_open_part(
            handle, GROUP_KEY, n, counts, ffi.NULL, ffi.NULL, FLOAT32, lib.MLC_OP_SUM, 0, 1, 1,
            step, opener, err, 512,
        )  # fmt: skip
        assert rc == lib.MLC_OK, ffi.string(err)
        for k in order:
            busy(args.work_us * 1e-6)
            buf = ffi.from_buffer(arrays[k])
            lib.mlc_latch_add(latch, 1)
            start = time.perf_counter()
            rc = lib.mlc_team_group_arrive_part(
                handle, GROUP_KEY, n, counts, ffi.NULL, ffi.NULL, FLOAT32, lib.MLC_OP_SUM, 0, 1, 1,
                k, step, buf, buf, ffi.addressof(lib, "mlc_latch_done"), latch, err, 512,
            )  # fmt: skip
            if step > args.warmup:
                times.append(time.perf_counter() - start)
            assert rc == lib.MLC_OK, ffi.string(err)
        assert lib.mlc_latch_wait(latch) == lib.MLC_OK
        lib.mlc_latch_free(latch)
        want = nranks * (nranks + 1) / 2
        assert all(a[0] == want and a[-1] == want for a in arrays), "a wrong sum"
    if mc.get_rank() == 0:
        us = [t * 1e6 for t in times]
        print(
            f"{nranks} ranks, {n} tensors, {args.work_us:.0f} us of work between arrivals, "
            f"{args.steps} steps: one arrival median {statistics.median(us):.2f} us, "
            f"mean {statistics.fmean(us):.2f} us",
            flush=True,
        )
    mc.finalize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
