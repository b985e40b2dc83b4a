"""How much ml_comm's communication slows compute, with its threads on compute's core or
on a core of their own (ML_COMM_THREAD_CORES).

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/thread_cores.py \
        --rounds 5 --out benchmarks/results/thread_cores

Needs two cores, 0 and 1. Rank 0 trains: each step runs a fixed single-threaded compute
(float32 matmuls, OpenBLAS on one thread, the caller's thread pinned to core 0), then
mc.gradients of one float32 array of B MiB on a pipelined team, whose reduction runs on
the team's threads behind the next step's compute. Rank 1 is the partner: it only calls
gradients, its caller's thread and team threads on core 1. Rank 0's team threads are on
core 0 with the compute ("shared", ML_COMM_THREAD_CORES=0:1) or on core 1 ("own",
ML_COMM_THREAD_CORES=1:1).

The figure is the compute's median time per step while a reduction is in flight over its
median time per step with no communication at all, both measured in the same init, in
alternating blocks (compute alone, then with communication, for each B). Each round
runs every threads-per-team count and both placements, the placements alternating, so
a machine that is busy for a while slows each case alike; the table gives the median and
range of the rounds' ratios. Absolute times on a shared machine are noise: only ratios
are reported.
"""

from __future__ import annotations

import os

# Before NumPy loads OpenBLAS: the compute is one thread, on the core it is pinned to.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import ml_comm as mc  # noqa: E402

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")

COMPUTE_CORE, COMM_CORE = 0, 1
# ML_COMM_THREAD_CORES per local rank (rank 0 computes, rank 1 is the partner).
PLACEMENTS = {"shared": f"{COMPUTE_CORE}:{COMM_CORE}", "own": f"{COMM_CORE}:{COMM_CORE}"}
MIB = 1 << 20


def compute_step(a: np.ndarray, b: np.ndarray, reps: int) -> float:
    """Seconds of `reps` matmuls: the step's fixed compute."""
    t0 = time.perf_counter()
    for _ in range(reps):
        np.matmul(a, b, out=a)
        a *= 1e-3  # keeps the values finite; the same work every step
    return time.perf_counter() - t0


def calibrate(a, b, seconds: float) -> int:
    """Matmuls per step for a step of about `seconds` on an idle core."""
    compute_step(a, b, 3)
    per = min(compute_step(a, b, 5) for _ in range(3)) / 5
    return max(1, round(seconds / per))


def block(rank, grads, steps, a, b, reps, with_comm: bool) -> list[tuple[float, float]]:
    """Rank 0's (compute, whole step) seconds of `steps` steps (rank 1: none), with a
    pipelined reduction of `grads` in flight or without communication."""
    times = []
    if with_comm:
        # Pipelined from the first call, synchronous for the last: the block ends drained.
        mc.config_team(0, 0, -1, steps + 2)
        mc.gradients(grads)  # the first reduction in flight from here
        for _ in range(steps):
            t0 = time.perf_counter()
            compute = compute_step(a, b, reps) if rank == 0 else 0.0
            mc.gradients(grads)  # waits for the previous step's reduction
            times.append((compute, time.perf_counter() - t0))
        mc.gradients(grads)  # synchronous: nothing left in flight
    elif rank == 0:
        times = [(c, c) for c in (compute_step(a, b, reps) for _ in range(steps))]
    mc.barrier()
    return times if rank == 0 else []


def one_init(args, rank, nthreads, placement, reps, a, b) -> dict[int, tuple[float, float]]:
    """One init with `nthreads` threads per team placed as `placement`: per size, the
    compute's slowdown and the whole step's, over compute alone (rank 0; rank 1: empty)."""
    os.environ["ML_COMM_THREAD_CORES"] = PLACEMENTS[placement]
    mc.init(nthreads, 1, 1 << 20)
    # After init: the allowed-core check reads the caller's affinity, and the team's
    # threads must not inherit this pin (ML_COMM_THREAD_CORES places them).
    os.sched_setaffinity(0, {COMPUTE_CORE if rank == 0 else COMM_CORE})
    ratios = {}
    try:
        for size in args.sizes:
            grads = [np.ones(size * MIB // 4, np.float32)]
            block(rank, grads, 2, a, b, reps, True)  # warm up: pools, pages, connections
            alone, busy = [], []
            for _ in range(args.blocks):
                alone += block(rank, grads, args.steps, a, b, reps, False)
                busy += block(rank, grads, args.steps, a, b, reps, True)
            if rank == 0:
                base = statistics.median(c for c, _ in alone)
                ratios[size] = (
                    statistics.median(c for c, _ in busy) / base,
                    statistics.median(s for _, s in busy) / base,
                )
    finally:
        mc.finalize()
        os.sched_setaffinity(0, {COMPUTE_CORE, COMM_CORE})
    return ratios


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def table(results, args) -> str:
    lines = [
        "# compute: compute time per step with a pipelined reduction in flight / compute",
        "# alone; step: the whole step (compute, then gradients waiting for the previous",
        f"# reduction) / compute alone. Median (range) over {args.rounds} rounds; rank 0's",
        "# team threads on the compute's core (shared) or on a core of their own (own)",
        f"{'MiB':>4} {'threads':>7} {'compute shared':>22} {'compute own':>22} "
        f"{'step shared':>22} {'step own':>22}",
    ]
    for size in args.sizes:
        for nthreads in args.threads:
            cells = [
                spread([r[which] for r in results[p][nthreads][size]])
                for which in (0, 1)
                for p in PLACEMENTS
            ]
            lines.append(f"{size:>4} {nthreads:>7} " + " ".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], help="MiB per step")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--steps", type=int, default=6, help="timed steps per block")
    p.add_argument("--blocks", type=int, default=2, help="alone/with-communication pairs")
    p.add_argument("--step-ms", type=float, default=40.0, help="compute per step")
    p.add_argument("--out", type=Path, help="folder for table.txt and results.json")
    args = p.parse_args()
    if not {COMPUTE_CORE, COMM_CORE} <= os.sched_getaffinity(0):
        raise SystemExit(f"needs cores {COMPUTE_CORE} and {COMM_CORE}")
    mc.init_mpi()
    rank = mc.get_rank()
    if mc.get_nranks() != 2:
        raise SystemExit("run with 2 ranks")
    rng = np.random.default_rng(0)
    a, b = rng.random((256, 256), np.float32), rng.random((256, 256), np.float32)
    os.sched_setaffinity(0, {COMPUTE_CORE})
    reps = calibrate(a, b, args.step_ms / 1e3) if rank == 0 else 0
    os.sched_setaffinity(0, {COMPUTE_CORE, COMM_CORE})
    results = {pl: {n: {s: [] for s in args.sizes} for n in args.threads} for pl in PLACEMENTS}
    order = list(PLACEMENTS)
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for nthreads in args.threads:
            for placement in order if r % 2 == 0 else order[::-1]:
                for size, ratio in one_init(args, rank, nthreads, placement, reps, a, b).items():
                    results[placement][nthreads][size].append(ratio)
        if rank == 0:
            print(
                f"# round {r + 1}/{args.rounds} done at {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    if rank != 0:
        return
    text = table(results, args)
    print(text, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.txt").write_text(text + "\n")
        figures = {"args": {k: str(v) for k, v in vars(args).items()}, "matmuls_per_step": reps}
        figures["ratios"] = results
        (args.out / "results.json").write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
