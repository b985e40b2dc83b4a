"""What the agreement check and the finite check cost: the same allreduce on teams that
differ only in their checks, interleaved iteration by iteration in one run.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/check_cost.py
    .venv/bin/mpiexec -n 4 .venv/bin/python benchmarks/check_cost.py -b 8 -e 64M -f 8

Four teams of one thread each (csrc/agree/exchange.c explains the checks):

- off:      ML_COMM_CHECK_LAYOUT=0, the core without any exchange (as before the checks);
- layout:   the default, the signature exchange, small allreduces inside it (direct);
- exchange: the signature exchange, but nothing inside it (ML_COMM_DIRECT_BYTES=0),
            i.e. what the check costs on its own before the usual algorithm;
- finite:   the default plus ML_COMM_CHECK_FINITE=1.

Each iteration runs `allreduce_sum` on one team after a barrier; the order of the teams
rotates between iterations, so machine noise hits all alike. A time is the slowest rank's;
the table gives medians and each team's time over the `off` team's. Integer-valued inputs
are checked once per size (#wrong, summed over ranks and teams).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import ml_comm as mc
from ml_comm import api

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from allreduce import human_bytes, parse_bytes  # noqa: E402

TEAMS = ("off", "layout", "exchange", "finite")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-b", "--min-bytes", type=parse_bytes, default=8)
    p.add_argument("-e", "--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("-f", "--factor", type=int, default=8)
    p.add_argument("--seconds-per-size", type=float, default=2.0)
    p.add_argument("--max-iters", type=int, default=2000)
    args = p.parse_args(argv)

    mc.init(1, len(TEAMS), 1 << 20)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    handles, lib = api.session().teams, api.lib  # the core's setters, team by team
    lib.mlc_team_set_checks(handles[0], 0, 0)
    lib.mlc_team_set_direct_threshold(handles[2], 0)
    lib.mlc_team_set_checks(handles[3], 1, 1)
    if rank == 0:
        print(f"# ml_comm check cost: {n} ranks, float32 allreduce_sum, teams {', '.join(TEAMS)}")
        print(
            f"# direct allreduce up to {mc.team_settings(1)['direct_bytes']} B at this rank count"
        )
        print(f"# command: {' '.join(sys.argv)}")
        head = "".join(f" {t + ' (us)':>14}" for t in TEAMS)
        ratios = "".join(f" {t + '/off':>13}" for t in TEAMS[1:])
        print(f"# {'size':>8}{head}{ratios} {'iters':>6} {'#wrong':>6}", flush=True)
    size = args.min_bytes
    while size <= args.max_bytes:
        count = max(size // 4, 1)
        buf = np.zeros(count, np.float32)
        wrong = 0
        for t in range(len(TEAMS)):  # one checked call per team
            buf[:] = np.arange(count) % 13 + rank
            mc.allreduce_sum(buf, t)
            want = (np.arange(count) % 13) * n + n * (n - 1) // 2
            wrong += int(np.count_nonzero(buf != want))
        buf[:] = 0
        for t in range(len(TEAMS)):  # warm up
            for _ in range(3):
                mc.allreduce_sum(buf, t)
        comm.Barrier()
        t0 = time.perf_counter()
        mc.allreduce_sum(buf, 1)
        one = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        iters = int(
            min(args.max_iters, max(5, args.seconds_per_size / len(TEAMS) / max(one, 1e-7)))
        )
        times = np.zeros((len(TEAMS), iters))
        for it in range(iters):
            for k in range(len(TEAMS)):
                t = (it + k) % len(TEAMS)
                comm.Barrier()
                start = time.perf_counter()
                mc.allreduce_sum(buf, t)
                times[t, it] = time.perf_counter() - start
        comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
        wrong = comm.allreduce(wrong)
        if rank == 0:
            med = np.median(times, axis=1) * 1e6
            cells = "".join(f" {m:14.1f}" for m in med)
            rel = "".join(f" {m / med[0]:13.2f}" for m in med[1:])
            print(f"  {human_bytes(size):>8}{cells}{rel} {iters:6d} {wrong:6d}", flush=True)
        size *= args.factor
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
