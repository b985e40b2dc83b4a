"""Device arrays on a GPU: `mc.gradients` of a PyTorch CUDA tensor against what a user does
without it (copy to the host, `MPI_Allreduce`, copy back), in the same run, and the staging
copies' throughput against a pinned `cudaMemcpyAsync` of the same bytes.

    mpiexec -n 2 python benchmarks/device_gradients.py --json out.json

Ranks share GPU 0 unless there are as many GPUs as local ranks (then rank r takes GPU r).
For each size (float32, integer-valued: every sum is exact) the cases alternate iteration by
iteration, each iteration after a barrier, its time the slowest rank's; a case's time is the
median. Cases:
- ``ml_comm``: ``mc.gradients([x])``, x a CUDA tensor: a new CUDA tensor back, on the device
  when the call returns;
- ``by_hand``: ``h = x.cpu().numpy(); comm.Allreduce(IN_PLACE, h); h /= n;
  y = torch.from_numpy(h).to(device)``: the plain user path (pageable host memory);
- ``by_hand_pinned``: the same through pinned host buffers allocated once, copies
  ``non_blocking`` and synchronised: a careful user's path;
- ``host``: ``mc.gradients`` of the same bytes already in host memory (NumPy): the host path
  alone, what the staging adds to.
ratio = t_case / t_ml_comm (above 1: ml_comm faster). Before timing, each case's result is
compared with the known average bit for bit (#wrong).

Staging throughput: bytes / time of the staging copies themselves (CUDA events around each
piece's copies, `mlc_team_get_device_stats`, over the timed ml_comm iterations), each way,
against one pinned `copy_(non_blocking=True)` of the whole buffer timed by CUDA events, both
ranks copying at once as they do inside ml_comm, and each rank alone (the link's rate for one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import torch
from ml_comm._core import ffi, lib
from mpi4py import MPI

import ml_comm as mc

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")
from ml_comm import api

MIB = 1 << 20


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-mib", default="1,4,16,64,256")
    p.add_argument("--iters", type=int, default=0, help="0: by size (at least 5)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    return p.parse_args()


def slowest(comm, seconds: float) -> float:
    return comm.allreduce(seconds, op=MPI.MAX)


def known(rank: int, count: int) -> np.ndarray:
    return ((np.arange(count) % 13) + rank).astype(np.float32)


def expected(nranks: int, count: int) -> np.ndarray:
    total = sum(known(r, count).astype(np.float64) for r in range(nranks))
    return (total / nranks).astype(np.float32)


def stats(team):
    s = ffi.new("mlc_device_stats *")
    lib.mlc_team_get_device_stats(team, s)
    return s.bytes_down, s.seconds_down, s.bytes_up, s.seconds_up


def pinned_copy_seconds(x: torch.Tensor, pinned: torch.Tensor, comm, alone: bool, reps: int = 5):
    """One pinned copy of x each way timed by CUDA events, both ranks at once (as they copy
    inside ml_comm), or alone (one rank after the other): each way's median."""
    down, up = [], []
    turns = range(comm.Get_size()) if alone else [None]
    for _ in range(reps):
        for way in (down, up):
            for turn in turns:
                comm.Barrier()
                if turn is not None and turn != comm.Get_rank():
                    continue
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                if way is down:
                    pinned.copy_(x, non_blocking=True)
                else:
                    x.copy_(pinned, non_blocking=True)
                end.record()
                end.synchronize()
                way.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(down), statistics.median(up)


def cases(comm, device, x: torch.Tensor, host: np.ndarray, pinned: torch.Tensor) -> dict:
    n = comm.Get_size()

    def ml_comm_case():
        return mc.gradients([x])[0]

    def by_hand():
        h = x.cpu().numpy()
        comm.Allreduce(MPI.IN_PLACE, h, op=MPI.SUM)
        h /= n
        return torch.from_numpy(h).to(device)

    def by_hand_pinned():
        pinned.copy_(x, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        h = pinned.numpy()
        comm.Allreduce(MPI.IN_PLACE, h, op=MPI.SUM)
        h /= n
        y = torch.empty_like(x)
        y.copy_(pinned, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        return y

    def host_case():
        return mc.gradients([host])[0]

    return {"ml_comm": ml_comm_case, "by_hand": by_hand, "by_hand_pinned": by_hand_pinned,
            "host": host_case}  # fmt: skip


def measure(comm, team, device, mib: float, iters: int) -> dict:
    rank, n = comm.Get_rank(), comm.Get_size()
    count = int(mib * MIB) // 4
    iters = iters or max(5, min(30, int(2048 / max(mib, 1))))
    x = torch.from_numpy(known(rank, count)).to(device)
    pinned = torch.empty(count, dtype=torch.float32, pin_memory=True)
    want = expected(n, count).view(np.uint32)
    run = cases(comm, device, x, known(rank, count), pinned)
    wrong = {}
    for name, case in run.items():
        out = case()
        got = out.cpu().numpy() if isinstance(out, torch.Tensor) else out
        wrong[name] = comm.allreduce(int(np.count_nonzero(got.view(np.uint32) != want)))
    times = {name: [] for name in run}
    before = stats(team)
    names = list(run)
    for i in range(iters):
        for name in names if i % 2 == 0 else names[::-1]:
            comm.Barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run[name]()
            torch.cuda.synchronize()
            times[name].append(slowest(comm, time.perf_counter() - t0))
    after = stats(team)
    medians = {name: statistics.median(t) for name, t in times.items()}
    # ml_comm's staging copies over the timed iterations (the other cases make none).
    bytes_down, s_down = after[0] - before[0], after[1] - before[1]
    bytes_up, s_up = after[2] - before[2], after[3] - before[3]
    memcpy_down, memcpy_up = pinned_copy_seconds(x, pinned, comm, alone=False)
    alone_down, alone_up = pinned_copy_seconds(x, pinned, comm, alone=True)
    nbytes = count * 4
    row = {
        "mib": mib,
        "iters": iters,
        "seconds": medians,
        "ratio": {k: medians[k] / medians["ml_comm"] for k in medians},
        "wrong": wrong,
        "staging_gbps_down": comm.allreduce(bytes_down / s_down / 1e9 if s_down else 0, op=MPI.MIN),
        "staging_gbps_up": comm.allreduce(bytes_up / s_up / 1e9 if s_up else 0, op=MPI.MIN),
        "memcpy_gbps_down": comm.allreduce(nbytes / memcpy_down / 1e9, op=MPI.MIN),
        "memcpy_gbps_up": comm.allreduce(nbytes / memcpy_up / 1e9, op=MPI.MIN),
        "memcpy_alone_gbps_down": comm.allreduce(nbytes / alone_down / 1e9, op=MPI.MIN),
        "memcpy_alone_gbps_up": comm.allreduce(nbytes / alone_up / 1e9, op=MPI.MIN),
    }
    row["staging_of_memcpy_down"] = row["staging_gbps_down"] / row["memcpy_gbps_down"]
    row["staging_of_memcpy_up"] = row["staging_gbps_up"] / row["memcpy_gbps_up"]
    row["staging_of_alone_down"] = row["staging_gbps_down"] / row["memcpy_alone_gbps_down"]
    row["staging_of_alone_up"] = row["staging_gbps_up"] / row["memcpy_alone_gbps_up"]
    return row


def main() -> None:
    args = parse()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    local = int(
        os.environ.get("MPI_LOCALRANKID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", rank))
    )
    device = torch.device("cuda", local if torch.cuda.device_count() > local else 0)
    torch.cuda.set_device(device)
    mc.init(args.threads, 1, 64 * MIB)
    team = api.session().team(0)
    rows = []
    for mib in [float(s) for s in args.sizes_mib.split(",")]:
        row = measure(comm, team, device, mib, args.iters)
        rows.append(row)
        if rank == 0:
            r = row["ratio"]
            print(f"{mib:7.1f} MiB  ml_comm {row['seconds']['ml_comm'] * 1e3:8.2f} ms  "
                  f"by_hand x{r['by_hand']:.2f}  pinned x{r['by_hand_pinned']:.2f}  "
                  f"host x{r['host']:.2f}  staging/memcpy down "
                  f"{row['staging_of_memcpy_down']:.2f} up {row['staging_of_memcpy_up']:.2f}"
                  f" (alone "
                  f"{row['staging_of_alone_down']:.2f}, {row['staging_of_alone_up']:.2f}) "
                  f"GB/s {row['staging_gbps_down']:.1f}/{row['staging_gbps_up']:.1f}  "
                  f"wrong {row['wrong']}", flush=True)  # fmt: skip
    if rank == 0 and args.json:
        meta = {
            "command": f"mpiexec -n {n} python benchmarks/device_gradients.py",
            "gpu": torch.cuda.get_device_name(device),
            "ranks": n,
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "mpi": MPI.Get_library_version().splitlines()[0],
            "settings": {k: v for k, v in os.environ.items() if k.startswith("ML_COMM_")},
        }
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    mc.finalize()


if __name__ == "__main__":
    main()
