"""What the DDP hook costs per bucket: the call DDP makes (`_hook(averager, bucket)`, then
the Future's wait) against `MPI_Allreduce` of the same bytes, in the same run, the ways
alternated round by round (the order reversed every other round) so that drifting load
hits each alike.

    .venv-torch/bin/mpiexec -n 2 .venv-torch/bin/python -P benchmarks/ddp_hook_cost.py \\
        --elements 1024 262144 --rounds 20 --calls 200 [--rev GIT_REV] [--json FILE]

Ways timed: `hook` (the product's path); `submit` (the averager's Future without the
chained one that names the error to DDP); `mpi`; and with --rev, `hook@REV`: that
revision's ml_comm/torch/ddp.py (read with `git show`) over this tree's core, so a change
to the hook is compared with the hook before it in one run. Each round's time is the
slowest rank's mean per call; the report gives, per size, each way's median over the
rounds and the median and 25-75 % range of the per-round ratios against `hook`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import ml_comm as mc
from ml_comm.torch import ddp

ROOT = Path(__file__).resolve().parents[1]


class Bucket:
    """What DDP hands the hook: its flat buffer."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def buffer(self) -> torch.Tensor:
        return self.tensor


def hook_of_revision(rev: str):
    """That revision's ddp module, loaded beside this tree's package."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:ml_comm/torch/ddp.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    spec = importlib.util.spec_from_loader("ml_comm.torch.ddp_at_rev", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "ml_comm.torch"
    exec(compile(text, f"{rev}:ml_comm/torch/ddp.py", "exec"), module.__dict__)
    return module


def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(values, q))


def time_size(elements: int, args, comm, current, previous_module, previous) -> dict:
    """One bucket size: every way in alternated rounds; the report's row."""
    tensor = torch.full((elements,), float(comm.rank + 1))
    bucket = Bucket(tensor)
    array = np.full(elements, float(comm.rank + 1), np.float32)

    def hook(averager=current, module=ddp) -> None:
        for _ in range(args.calls):
            module._hook(averager, bucket).wait()

    def submit() -> None:
        for _ in range(args.calls):
            current.submit(tensor).wait()

    def mpi() -> None:
        for _ in range(args.calls):
            comm.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM)

    ways = {"hook": hook, "submit": submit, "mpi": mpi}
    if previous:
        ways[f"hook@{args.rev}"] = lambda: hook(previous, previous_module)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for round_index in range(args.rounds):
        order = list(ways.items())
        if round_index % 2:
            order.reverse()
        for name, run in order:
            comm.Barrier()
            start = time.perf_counter()
            run()
            mean = (time.perf_counter() - start) / args.calls
            times[name].append(comm.allreduce(mean, op=MPI.MAX))
    # Every way averaged in place the same number of times: equal values on every rank.
    expected = float(sum(range(1, comm.size + 1))) / comm.size
    assert torch.allclose(tensor, torch.full_like(tensor, expected)), "hook's average"
    row = {"bytes": 4 * elements, "median_us": {}, "ratio_to_hook": {}}
    for name, values in times.items():
        row["median_us"][name] = statistics.median(values) * 1e6
        ratios = [value / base for value, base in zip(values, times["hook"])]
        row["ratio_to_hook"][name] = [
            quantile(ratios, 0.25),
            statistics.median(ratios),
            quantile(ratios, 0.75),
        ]
    row["rounds_us"] = {name: [v * 1e6 for v in values] for name, values in times.items()}
    if comm.rank == 0:
        cells = ", ".join(
            f"{name} {row['median_us'][name]:.1f} us "
            f"(x{row['ratio_to_hook'][name][1]:.2f}, "
            f"{row['ratio_to_hook'][name][0]:.2f}-{row['ratio_to_hook'][name][2]:.2f})"
            for name in times
        )
        print(f"{4 * elements} bytes, {args.rounds} rounds of {args.calls}: {cells}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, nargs="+", default=[1024, 262144])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rev", help="a git revision whose hook is timed beside this one")
    parser.add_argument("--json", help="write the rounds and the report here (rank 0)")
    args = parser.parse_args()

    mc.init(2, 1, 1 << 16)
    comm = MPI.COMM_WORLD
    current = ddp.BucketAverager(0)
    previous_module = hook_of_revision(args.rev) if args.rev else None
    previous = previous_module.BucketAverager(0) if previous_module else None
    report = [
        time_size(elements, args, comm, current, previous_module, previous)
        for elements in args.elements
    ]
    if comm.rank == 0 and args.json:
        Path(args.json).write_text(json.dumps({"ranks": comm.size, "rows": report}, indent=1))
    current.close()
    if previous:
        previous.close()
    mc.finalize()


if __name__ == "__main__":
    sys.exit(main())
