"""Where a reduction's time goes: the analysis behind RESULTS.md's bounds, not a product
figure (allreduce.py gives those).

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/cost_split.py placement -s 64M
    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/cost_split.py cpu --api tf --shapes resnet50

placement: one float32 array, four calls interleaved call by call (the order reversed every
other iteration), a barrier before each: MPI_Allreduce in place, mc.average (in place),
mc.gradients([a]) (a new result from the pool while the previous one lives) and
mc.gradients([a], out=[b]) (a fixed output); --only times one of them alone. Every buffer
is written before the loop: an np.zeros array never written reads the kernel's shared zero
page, which measures nothing.

layers: a one-array mc.gradients (--size bytes, 8 by default) through each layer it
crosses, each alone in blocks of --iters calls, the fastest of 5 blocks: the API call, the
NumPy backend's method, the glue's one C call (`_numpy_glue.gradients`; on older checkouts
`_numpy_glue.average`, with the caller's identity read once before the loop), and
MPI_Allreduce for scale. Differences between rows are what each layer adds. It also runs
on older checkouts (for an A/B with ab_builds.py's --a):

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/cost_split.py layers -n 100000
    PYTHONPATH=OLD .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/cost_split.py layers -n 100000

cpu: mc.gradients of a list (--shapes resnet50, or --tensors K of --size bytes together)
through NumPy (--api gradients) or the TensorFlow op inside tf.function, the caller holding
the inputs (--api tf) or the gradients computed in the function (--api tf-forwarded: x * 2,
reduced in place; --api tf-floor: the multiply alone), in a loop: wall time per call, and
the process's CPU per call split into the team's threads (team_stats' thread_cpu_seconds)
and the rest of the process (TensorFlow's threads, Python). Rank 0 prints.

Both bracket their timed loop for a profiler: with PERF_CTL and PERF_ACK naming the fifos of
`perf record --delay=-1 --control=fifo:CTL,ACK`, they write "enable" before the loop and
"disable" after it, so the profile holds the steady state only. Rank 0 under perf, rank 1
not (MPICH's mpiexec runs the two commands either side of ":" as ranks 0 and 1):

    mkfifo /tmp/perf.ctl /tmp/perf.ack
    .venv/bin/mpiexec -n 1 env PERF_CTL=/tmp/perf.ctl PERF_ACK=/tmp/perf.ack perf record \
        -F 1999 -g --delay=-1 --control=fifo:/tmp/perf.ctl,/tmp/perf.ack -o /tmp/perf.data \
        .venv/bin/python benchmarks/cost_split.py placement --only pool -n 40 \
      : -n 1 .venv/bin/python benchmarks/cost_split.py placement --only pool -n 40
    perf report -i /tmp/perf.data --no-children --sort sym
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

import ml_comm as mc

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import product_paths  # noqa: E402
from allreduce import parse_bytes  # noqa: E402

PLACEMENTS = {"mpi": "MPI_Allreduce", "in-place": "average (in place)",
              "pool": "gradients (pool)", "out": "gradients(out=)"}  # fmt: skip


def profiler(command: str) -> None:
    """Tell a waiting `perf record --control` to start or stop (no-op without one)."""
    if "PERF_CTL" not in os.environ:
        return
    with open(os.environ["PERF_CTL"], "w") as ctl:
        ctl.write(command + "\n")
    with open(os.environ["PERF_ACK"]) as ack:
        ack.readline()


def placement(args, comm, MPI) -> None:
    count = args.size // 4
    mc.init(args.threads, 1, count)
    a, out = (np.full(count, 1.0, np.float32) for _ in range(2))
    mine = np.full(count, 0.0, np.float32)  # written, so its pages exist; sums stay 0
    kept: dict = {}

    def mpi():
        comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.SUM)

    def in_place():
        mc.average(out)

    def pooled():
        kept["result"] = mc.gradients([a])

    def fixed_out():
        mc.gradients([a], out=[out])

    calls = {"MPI_Allreduce": mpi, "average (in place)": in_place,
             "gradients (pool)": pooled, "gradients(out=)": fixed_out}  # fmt: skip
    if args.only is not None:  # one call alone, for a profile of it
        calls = {name: fn for name, fn in calls.items() if name == PLACEMENTS[args.only]}
    for call in calls.values():  # warm: pool blocks, huge pages, the team's threads
        for _ in range(3):
            call()
    times = np.zeros((len(calls), args.iters))
    fns = list(calls.values())
    profiler("enable")
    for it in range(args.iters):
        for k in range(len(fns)) if it % 2 == 0 else range(len(fns) - 1, -1, -1):
            comm.Barrier()
            t0 = time.perf_counter()
            fns[k]()
            times[k, it] = time.perf_counter() - t0
    profiler("disable")
    comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    if comm.rank == 0:
        med = np.median(times, axis=1)
        mpi_median = med[0] if args.only is None else np.nan
        print(f"# {comm.size} ranks, {args.threads} threads/team, {args.size} B float32, "
              f"{args.iters} interleaved iterations; median of the slowest rank")  # fmt: skip
        for name, m in zip(calls, med):
            print(f"{name:20s} {m * 1e3:9.3f} ms   MPI / this {mpi_median / m:5.2f}")
    mc.finalize()


def layers(args, comm, MPI) -> None:
    count = max(args.size // 4, 1)
    mc.init(args.threads, 1, count)
    a = np.ones(count, np.float32)
    sent, got = np.ones(count, np.float32), np.empty(count, np.float32)
    from ml_comm.arrays import _numpy_glue

    mc.gradients([a])  # binds the team's one-array path
    session = mc.api.session() if hasattr(mc.api, "session") else mc.api._active()  # older
    backend = session.backend
    if hasattr(_numpy_glue, "gradients"):  # the whole one-array call in C
        plain, thread_state = backend.plain, backend.thread_state
        glue = lambda: _numpy_glue.gradients(plain, [a], 0, thread_state)  # noqa: E731
    elif hasattr(session, "calls"):  # calls carry the caller's identity
        binding, signed = backend.bindings[0], session.calls.identity()
        glue = lambda: _numpy_glue.average(binding, a, signed)  # noqa: E731
        try:
            glue()
        except TypeError:  # a glue that took the identity as three arguments
            glue = lambda: _numpy_glue.average(binding, a, *signed)  # noqa: E731
    else:
        binding = backend.plain[0]
        glue = lambda: _numpy_glue.average(binding, a)  # noqa: E731
    rows = {
        "mc.gradients([a])": lambda: mc.gradients([a]),
        "backend.gradients": lambda: backend.gradients([a], 0),
        "glue's C call": glue,
        "MPI_Allreduce": lambda: comm.Allreduce(sent, got, op=MPI.SUM),
    }
    best = dict.fromkeys(rows, np.inf)
    for _ in range(5):
        for name, fn in rows.items():
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / args.iters)
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {count * 4} B float32, fastest of 5 blocks of "
              f"{args.iters} calls; per call, us")  # fmt: skip
        for name, seconds in best.items():
            print(f"{name:20s} {seconds * 1e6:7.3f}")
    mc.finalize()


def cpu(args, comm, MPI) -> None:
    if args.shapes == "resnet50":
        shapes = product_paths.resnet50_shapes()
    else:
        shapes = product_paths.equal_shapes(args.size // 4, args.tensors)
    count = sum(int(np.prod(s)) for s in shapes)
    if args.api in ("tf", "tf-forwarded", "tf-floor"):
        import tensorflow as tf

        mc.init(args.threads, 1, count, framework="tensorflow")
        inputs = [tf.constant(np.ones(s, np.float32)) for s in shapes]
        step = tf.function(
            {
                "tf": lambda xs: mc.gradients(list(xs)),
                "tf-forwarded": lambda xs: mc.gradients([x * 2 for x in xs]),
                "tf-floor": lambda xs: [x * 2 for x in xs],
            }[args.api]
        )

        def call():
            return step(inputs)
    else:
        mc.init(args.threads, 1, count)
        inputs = [np.ones(s, np.float32) for s in shapes]

        def call():
            return mc.gradients(inputs)

    kept = [call() for _ in range(3)][-1]
    comm.Barrier()
    profiler("enable")
    team0 = mc.team_stats(0)["thread_cpu_seconds"]
    use0 = resource.getrusage(resource.RUSAGE_SELF)
    walls = []
    for _ in range(args.iters):
        comm.Barrier()
        t0 = time.perf_counter()
        kept = call()  # the previous results live until the call returns
        walls.append(time.perf_counter() - t0)
    use1 = resource.getrusage(resource.RUSAGE_SELF)
    team1 = mc.team_stats(0)["thread_cpu_seconds"]
    profiler("disable")
    del kept
    n = args.iters
    process = (use1.ru_utime - use0.ru_utime + use1.ru_stime - use0.ru_stime) / n
    team = (team1 - team0) / n
    row = np.array([np.median(walls), process, team, process - team])
    rows = comm.gather(row)
    if comm.rank == 0:
        print(f"# {args.api}, {len(shapes)} tensors, {count * 4} B float32, {comm.size} ranks, "
              f"{args.threads} threads/team, {n} calls; per call, ms")  # fmt: skip
        print("rank   wall  process CPU  team threads  rest of the process")
        for r, (wall, p, t, rest) in enumerate(rows):
            print(f"{r:4d} {wall * 1e3:6.1f} {p * 1e3:12.1f} {t * 1e3:13.1f} {rest * 1e3:20.1f}")
    mc.finalize()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("placement", "layers", "cpu"))
    p.add_argument("-s", "--size", type=parse_bytes, help="bytes (64M; layers: 8)")
    p.add_argument("-n", "--iters", type=int, default=30)
    p.add_argument("--only", choices=PLACEMENTS, help="placement only: time this call alone")
    p.add_argument("-t", "--threads", type=int, default=2, help="ml_comm threads per team")
    p.add_argument(
        "--api",
        choices=("gradients", "tf", "tf-forwarded", "tf-floor"),
        default="gradients",
        help="cpu only (tf-floor: tf-forwarded's multiply alone, no ml_comm)",
    )
    p.add_argument("--shapes", choices=("resnet50",), help="cpu only: this model's gradients")
    p.add_argument("--tensors", type=int, default=1, help="cpu only: tensors --size is split into")
    args = p.parse_args(argv)
    if args.size is None:
        args.size = 8 if args.what == "layers" else 64 << 20
    mc.init_mpi()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    {"placement": placement, "layers": layers, "cpu": cpu}[args.what](args, comm, MPI)
    return 0


if __name__ == "__main__":
    sys.exit(main())
