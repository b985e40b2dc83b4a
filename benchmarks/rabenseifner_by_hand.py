"""MPICH's MPI_Allreduce beside the same algorithm sent by hand through the same MPICH.

    eval "$(tools/testbed.sh env)"
    srun -N 3 --ntasks-per-node=1 --mpi=pmi2 tools/pin_to_node_core.sh .venv/bin/python \
        benchmarks/rabenseifner_by_hand.py -b 1M -e 16M --json FILE

The scale model replays MPICH's algorithm for large float32 sums (Rabenseifner's:
reduce-scatter by recursive halving, allgather by recursive doubling; at a node count
that is not a power of two the first even ranks first hand their whole vector to their
right neighbour and get the result back from it at the end) through SMPI. This runs that
algorithm's messages by hand, with mpi4py's blocking Send, Recv and Sendrecv between the
same pairs and of the same sizes, and times it against MPI_Allreduce in the same run:
the model can then be checked against the algorithm's messages as this MPICH carries
them, apart from what MPICH's collective adds around them.

Inputs are integer-valued, so both results are checked exactly against the known sum.
Each time is the median over --iters calls, each started after a barrier and timed to
the last rank's end. For the calls by hand it also prints when each rank's steps ended
(median ms after the call began): which exchange takes longer than its bytes need.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from allreduce import parse_bytes  # noqa: E402

TAG = 11
# The environment variables a result depends on, recorded in the JSON.
SETTINGS = ("UCX_", "MPIR_CVAR_", "GLIBC_TUNABLES")


def halves(lo: int, hi: int) -> tuple[tuple[int, int], tuple[int, int]]:
    mid = lo + (hi - lo) // 2
    return (lo, mid), (mid, hi)


def allreduce_by_hand(comm, vec: np.ndarray, scratch: np.ndarray, marks: list) -> None:
    """vec <- the sum of every rank's vec, in Rabenseifner's messages; appends (step,
    time) to marks as each of this rank's blocking steps ends."""
    rank, size = comm.rank, comm.size
    pof2 = 1 << (size.bit_length() - 1)
    extra = size - pof2
    if rank < 2 * extra and rank % 2 == 0:
        comm.Send(vec, rank + 1, TAG)
        marks.append(("sent the vector", time.perf_counter()))
        comm.Recv(vec, rank + 1, TAG)
        marks.append(("got the result", time.perf_counter()))
        return
    if rank < 2 * extra:
        comm.Recv(scratch, rank - 1, TAG)
        vec += scratch
        marks.append(("got a vector", time.perf_counter()))
    me = rank // 2 if rank < 2 * extra else rank - extra

    def real(r: int) -> int:
        return 2 * r + 1 if r < extra else r + extra

    lo, hi = 0, len(vec)
    kept = []
    mask = 1
    while mask < pof2:  # reduce-scatter: keep one half, send the other
        peer = me ^ mask
        low, high = halves(lo, hi)
        keep, give = (low, high) if me < peer else (high, low)
        comm.Sendrecv(
            vec[give[0] : give[1]], real(peer), TAG, scratch[keep[0] : keep[1]], real(peer), TAG
        )
        vec[keep[0] : keep[1]] += scratch[keep[0] : keep[1]]
        marks.append((f"halving with {real(peer)}", time.perf_counter()))
        kept.append((peer, give))
        lo, hi = keep
        mask <<= 1
    for peer, give in reversed(kept):  # allgather: the halves come back in reverse
        comm.Sendrecv(vec[lo:hi], real(peer), TAG, vec[give[0] : give[1]], real(peer), TAG)
        marks.append((f"doubling with {real(peer)}", time.perf_counter()))
        lo, hi = min(lo, give[0]), max(hi, give[1])
    if rank < 2 * extra:
        comm.Send(vec, rank - 1, TAG)
        marks.append(("sent the result", time.perf_counter()))


def timed(comm, call, iters: int) -> tuple[float, dict[str, float]]:
    """The median call time (to the last rank's end), and when each of this rank's steps
    ended, median ms after the call began (calls that append to the list they are given)."""
    times, ends = [], {}
    for _ in range(iters):
        marks: list = []
        comm.Barrier()
        start = time.perf_counter()
        call(marks)
        times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
        for step, t in marks:
            ends.setdefault(step, []).append((t - start) * 1e3)
    return statistics.median(times), {s: round(statistics.median(v), 2) for s, v in ends.items()}


def measure(comm, size: int, iters: int) -> dict:
    """One vector size: both calls checked exactly, then timed."""
    count = size // 4
    mine = np.arange(count, dtype=np.float32) % 1024 + comm.rank
    want = np.arange(count, dtype=np.float32) % 1024 * comm.size
    want += comm.size * (comm.size - 1) // 2
    out, vec, scratch = np.empty_like(mine), np.empty_like(mine), np.empty_like(mine)

    def by_hand(marks: list) -> None:
        vec[:] = mine
        allreduce_by_hand(comm, vec, scratch, marks)

    for _ in range(2):  # warm-up, and the exactness check
        comm.Allreduce(mine, out)
        by_hand([])
    wrong = int(np.count_nonzero(out != want)) + int(np.count_nonzero(vec != want))
    wrong = comm.allreduce(wrong)
    t_mpi, _ = timed(comm, lambda marks: comm.Allreduce(mine, out), iters)
    t_hand, ends = timed(comm, by_hand, iters)
    steps = comm.gather(ends)
    if comm.rank == 0:
        print(
            f"{size:>10} B  MPI_Allreduce {t_mpi * 1e3:8.2f} ms  by hand "
            f"{t_hand * 1e3:8.2f} ms  MPI / by hand {t_mpi / t_hand:5.2f}  wrong {wrong}",
            flush=True,
        )
        for r, rank_ends in enumerate(steps):
            print(f"    rank {r}: " + ", ".join(f"{s} {t:.1f}" for s, t in rank_ends.items()))
    return {
        "bytes": size,
        "mpi_time_us": t_mpi * 1e6,
        "by_hand_time_us": t_hand * 1e6,
        "wrong": wrong,
        "by_hand_step_ends_ms": steps,
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-b", type=parse_bytes, default="1M", help="smallest vector (8, 64K, 1M)")
    p.add_argument("-e", type=parse_bytes, default="16M", help="largest vector")
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--json")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rows = []
    size = args.b
    while size <= args.e:
        rows.append(measure(comm, size, args.iters))
        size *= 2
    if comm.rank == 0 and args.json:
        header = {
            "nranks": comm.size,
            "mpi_library": MPI.Get_library_version().splitlines()[0],
            "command": " ".join(sys.argv),
            "environment": {k: v for k, v in os.environ.items() if k.startswith(SETTINGS)},
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        with open(args.json, "w") as f:
            json.dump({"header": header, "rows": rows}, f, indent=1)
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
