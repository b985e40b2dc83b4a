"""CPU time a rank spends waiting for a late peer inside mc.gradients, and while idle.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/wait_cpu.py --late 3 --threads 2

Rank 0 calls gradients at once; the other ranks sleep --late seconds first. Rank 0 reports
the CPU time of its whole process (all threads: the caller and the team's threads, from
getrusage) during that call, and during --idle seconds with no call in flight, and the same
for a 64 MiB list (the ring on the team's threads) and a 4-byte one (the agreement exchange
and the direct allreduce on the caller's thread).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np

import ml_comm as mc

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--late", type=float, default=3.0)
    p.add_argument("--idle", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    mc.init(args.threads, 1, 1 << 24)
    rank = mc.get_rank()
    for label, count in (("4 B", 1), ("64 MiB", 16 << 20)):
        grads = [np.ones(count, np.float32)]
        mc.gradients(grads)  # warm up: pools, pages, connections
        mc.barrier()
        if rank != 0:
            time.sleep(args.late)
        c0, t0 = cpu(), time.perf_counter()
        mc.gradients(grads)
        c1, t1 = cpu(), time.perf_counter()
        if rank == 0:
            print(f"{label}: waited {t1 - t0:.2f} s for a peer {args.late:g} s late, "
                  f"CPU {c1 - c0:.3f} s ({args.threads} threads per team)", flush=True)  # fmt: skip
        mc.barrier()
    c0 = cpu()
    time.sleep(args.idle)
    if rank == 0:
        print(f"idle {args.idle:g} s between calls: CPU {cpu() - c0:.3f} s", flush=True)
    mc.finalize()


if __name__ == "__main__":
    main()
