"""The CPU that moving bytes through plain TCP sockets costs, with no MPI and no ml_comm:
a floor for any transport over the same network (RESULTS.md: the CPU of waiting threads).

Two tasks, one per node, exchange --bytes in each direction per step, both directions at
once (a receiving thread, `recv_into` a preallocated buffer; the main thread `sendall`s):
one kernel copy on each side, the least a socket allows. Each task prints its wall time and
its process's user and system CPU per step. A 2-node ring allreduce of G bytes sends and
receives G bytes per rank (the reduce-scatter's half and the allgather's), so --bytes G
is what one training step's gradients move. On the test bed (tools/testbed.sh), with the
link shaped as in the training runs:

    eval "$(tools/testbed.sh env)"
    srun -N 2 --ntasks-per-node=1 .venv/bin/python benchmarks/tcp_floor.py \
        --host 10.213.77.11 --bytes 19612968 --steps 20

Task 0 listens on --host (its node's address), task 1 connects to it. SLURM_PROCID says
which task is which.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import sys
import threading
import time

PORT = 47211
CONNECT_SECONDS = 30.0


def connect(host: str, port: int, listener: bool) -> socket.socket:
    if listener:
        with socket.create_server((host, port)) as server:
            server.settimeout(CONNECT_SECONDS)
            sock, _ = server.accept()
    else:
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=CONNECT_SECONDS)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    sock.settimeout(CONNECT_SECONDS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def exchange(sock: socket.socket, out: bytearray, into: memoryview) -> None:
    """Send `out` and receive len(into) bytes at the same time."""

    def receive() -> None:
        got = 0
        while got < len(into):
            n = sock.recv_into(into[got:], min(len(into) - got, 1 << 20))
            if n == 0:
                raise ConnectionError("the peer closed the connection")
            got += n

    receiver = threading.Thread(target=receive)
    receiver.start()
    sock.sendall(out)
    receiver.join()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", required=True, help="task 0's address (it listens there)")
    p.add_argument("--bytes", type=int, required=True, help="bytes each way per step")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--port", type=int, default=PORT)
    args = p.parse_args(argv)
    task = int(os.environ.get("SLURM_PROCID", "0"))
    out = bytearray(os.urandom(1 << 16)) * (args.bytes // (1 << 16) + 1)
    del out[args.bytes :]
    into = memoryview(bytearray(args.bytes))
    with connect(args.host, args.port, listener=task == 0) as sock:
        for _ in range(args.warmup):
            exchange(sock, out, into)
        use0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(args.steps):
            exchange(sock, out, into)
        use1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    per_step = 1e3 / args.steps
    user = (use1.ru_utime - use0.ru_utime) * per_step
    system = (use1.ru_stime - use0.ru_stime) * per_step
    print(
        f"task {task} ({socket.gethostname()}): {args.bytes} B each way per step, "
        f"{args.steps} steps: wall {(t1 - t0) * per_step:.1f} ms, CPU {user + system:.1f} ms "
        f"(user {user:.1f}, system {system:.1f}) per step",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
