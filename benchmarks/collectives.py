"""Allgather and reduce-scatter bandwidth, ml_comm against MPI on the same MPI, in the style
of nccl-tests.

    .venv/bin/mpiexec -n 3 .venv/bin/python benchmarks/collectives.py -b 1M -e 64M -f 4

For each size S (bytes, float32) it times, in the same run and interleaved iteration by
iteration (the order alternates, so machine noise hits both alike):

- allgather: ``mc.allgather(x)`` against ``comm.Allgather(x, out)``, x of S / n bytes per rank,
  S bytes gathered;
- allgatherv: the same ``mc.allgather(x)`` against MPI doing its job, rows whose number may
  differ by rank: ``comm.Allgather`` of the row counts, then ``comm.Allgatherv`` (what
  ``MPI_Allgather`` alone cannot do, and what Horovod's allgather runs);
- reducescatter: ``mc.reducescatter(x, op="sum")`` against ``comm.Reduce_scatter_block(x, out)``,
  x of S bytes, S / n bytes out per rank.

MPI writes into an output allocated once; ml_comm returns a new array each call, as its
callers get it. Each iteration starts after a barrier; its time is the slowest rank's; the
reported time is the median. busbw = S / time * (n-1)/n (the bytes each rank's link carries),
GB/s. ratio = time_MPI / time_ml_comm: above 1 means ml_comm is faster. One verification
iteration per size and implementation first (integer-valued floats, exact sums); any wrong
element makes the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

import ml_comm as mc

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from allreduce import parse_bytes  # noqa: E402


def timed(comm, fn, iters: int) -> float:
    """Median over iterations of the slowest rank's time."""
    times = []
    for _ in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    slowest = comm.allreduce(np.array(times), op=MPI.MAX)
    return float(np.median(slowest))


def cases(comm, count: int):
    """(name, ml_comm call, MPI call, check) for one size of count float32 elements."""
    n, r = comm.size, comm.rank
    part = count // n
    gather_in = (np.arange(part) % 13 + r).astype(np.float32)
    gather_out = np.empty(part * n, np.float32)
    want_gather = np.concatenate([(np.arange(part) % 13 + q).astype(np.float32) for q in range(n)])
    scatter_in = (np.arange(part * n) % 13 + r).astype(np.float32)
    scatter_out = np.empty(part, np.float32)
    mine = np.arange(part * n)[r * part : (r + 1) * part] % 13
    want_scatter = (mine * n + n * (n - 1) // 2).astype(np.float32)

    def mpi_allgather():
        comm.Allgather(gather_in, gather_out)
        return gather_out

    own_count, counts = np.array([part], np.int64), np.zeros(n, np.int64)

    def mpi_allgatherv():
        comm.Allgather(own_count, counts)
        comm.Allgatherv(gather_in, [gather_out, counts])
        return gather_out

    def mpi_reduce_scatter():
        comm.Reduce_scatter_block(scatter_in, scatter_out, op=MPI.SUM)
        return scatter_out

    return [
        ("allgather", lambda: mc.allgather(gather_in), mpi_allgather, want_gather),
        ("allgatherv", lambda: mc.allgather(gather_in), mpi_allgatherv, want_gather),
        ("reducescatter", lambda: mc.reducescatter(scatter_in, "sum"), mpi_reduce_scatter,
         want_scatter),
    ]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-b", "--begin", type=parse_bytes, default=parse_bytes("1M"))
    p.add_argument("-e", "--end", type=parse_bytes, default=parse_bytes("64M"))
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("--seconds-per-size", type=float, default=1.0)
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=200)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    mc.init(1, 1, args.end // 4)
    n = comm.size
    wrong = 0
    if comm.rank == 0:
        print(f"# {n} ranks, float32, MPI: {MPI.Get_library_version().splitlines()[0]}")
        print(f"# {'collective':>13} {'bytes':>10} {'ml_comm us':>11} {'busbw':>6} "
              f"{'MPI us':>10} {'busbw':>6} {'ratio':>6} {'#wrong':>6}")  # fmt: skip
    size = args.begin
    while size <= args.end:
        count = size // 4 // n * n
        for name, ours, theirs, want in cases(comm, count):
            bad = int((ours() != want).sum()) + int((theirs() != want).sum())
            wrong += comm.allreduce(bad)
            t0 = time.perf_counter()
            ours(), theirs()
            once = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            iters = int(
                min(args.max_iters, max(args.min_iters, args.seconds_per_size / max(once, 1e-9)))
            )
            t_ours, t_theirs = [], []
            for i in range(iters):  # alternate the order
                pair = [(t_ours, ours), (t_theirs, theirs)]
                for times, fn in pair if i % 2 == 0 else pair[::-1]:
                    times.append(timed(comm, fn, 1))
            mine, mpi = float(np.median(t_ours)), float(np.median(t_theirs))
            busbw = count * 4 / 1e9 * (n - 1) / n
            if comm.rank == 0:
                ours_text = f"{mine * 1e6:>11.1f} {busbw / mine:>6.2f}"
                mpi_text = f"{mpi * 1e6:>10.1f} {busbw / mpi:>6.2f}"
                print(
                    f"  {name:>13} {count * 4:>10} {ours_text} {mpi_text}",
                    f"{mpi / mine:>6.2f} {wrong:>6}",
                )
        size *= args.factor
    mc.finalize()
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
