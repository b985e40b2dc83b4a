"""Ping-pong and per-message costs between two ranks: the network part of the scale model's
calibration (`tools/dev.py project --calibrate` reads the JSON this writes).

    eval "$(tools/testbed.sh env)"
    srun -N 2 --ntasks-per-node=1 --mpi=pmi2 tools/pin_to_node_core.sh .venv/bin/python \
        benchmarks/pingpong.py --json benchmarks/results/testbed_2gbit_pingpong.json

Three measurements, plain MPI through mpi4py on the MPI ml_comm runs on:

- ping-pong: rank 0 sends S bytes, rank 1 sends them back; half the round trip, median
  over iterations that each start after a barrier, for S from 8 B to --max-bytes (x4);
- send overhead: rank 0 starts --window small sends at once (persistent requests, one
  Python call) and waits for them; the time per message is what a send costs its CPU
  (small messages go eagerly: a send completes once its bytes are with the kernel);
- receive overhead: rank 1 waits until those --window messages have all arrived, then
  starts as many receives and waits for them; the time per message is what taking an
  arrived message costs its CPU.

The latency of the wire is then the small messages' half round trip less one send and one
receive overhead. Each overhead is a median over --repeats rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

SMALL_BYTES = 8
TAG = 7


def ping_pong(comm, nbytes: int, iters: int) -> list[float]:
    """Half round trips, seconds, one per iteration."""
    buf = np.zeros(nbytes, np.uint8)
    peer = 1 - comm.rank
    times = []
    for _ in range(iters):
        comm.Barrier()
        t = time.perf_counter()
        if comm.rank == 0:
            comm.Send(buf, peer, TAG)
            comm.Recv(buf, peer, TAG)
        else:
            comm.Recv(buf, peer, TAG)
            comm.Send(buf, peer, TAG)
        times.append((time.perf_counter() - t) / 2)
    return times


def overheads(comm, window: int) -> tuple[float, float]:
    """(send, receive) seconds per small message, as rank 0 and rank 1 measured them."""
    bufs = np.zeros((window, SMALL_BYTES), np.uint8)
    if comm.rank == 0:
        reqs = [comm.Send_init(bufs[k], 1, TAG) for k in range(window)]
    else:
        reqs = [comm.Recv_init(bufs[k], 0, TAG) for k in range(window)]
    comm.Barrier()
    if comm.rank == 1:
        # The sender says it is done once its sends completed; a short pause then lets the
        # last messages leave the kernel's queue, so the receives below find them all.
        comm.Recv(np.zeros(1, np.uint8), 0, TAG + 1)
        time.sleep(0.01)
    t = time.perf_counter()
    MPI.Prequest.Startall(reqs)
    MPI.Request.Waitall(reqs)
    mine = (time.perf_counter() - t) / window
    if comm.rank == 0:
        comm.Send(np.zeros(1, np.uint8), 1, TAG + 1)
    for r in reqs:
        r.Free()
    both = comm.allgather(mine)
    return both[0], both[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--seconds-per-size", type=float, default=1.0)
    p.add_argument("--window", type=int, default=64, help="small messages per overhead round")
    p.add_argument("--repeats", type=int, default=200, help="overhead rounds")
    p.add_argument("--json", help="write the results here (rank 0)")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        if comm.rank == 0:
            print(f"pingpong: needs exactly 2 ranks, got {comm.size}", file=sys.stderr)
        return 2
    rows = []
    size = SMALL_BYTES
    while size <= args.max_bytes:
        first = ping_pong(comm, size, 3)  # warm-up, and the guess of the iterations
        iters = int(comm.bcast(max(5, min(2000, args.seconds_per_size / (2 * max(first))))))
        half = statistics.median(ping_pong(comm, size, iters))
        rows.append({"bytes": size, "half_round_trip_us": half * 1e6, "iterations": iters})
        if comm.rank == 0:
            print(f"{size:>10} B  half round trip {half * 1e6:10.1f} us", flush=True)
        size *= 4
    sends, recvs = zip(*(overheads(comm, args.window) for _ in range(args.repeats)))
    result = {
        "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        "ping_pong": rows,
        "send_overhead_us": statistics.median(sends) * 1e6,
        "recv_overhead_us": statistics.median(recvs) * 1e6,
        "window": args.window,
        "repeats": args.repeats,
        "command": " ".join(sys.argv),
    }
    if comm.rank == 0:
        print(
            f"per message: send {result['send_overhead_us']:.2f} us, "
            f"receive {result['recv_overhead_us']:.2f} us ({args.window} at once, "
            f"median of {args.repeats})"
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
