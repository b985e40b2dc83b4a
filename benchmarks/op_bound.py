"""What bounds the TensorFlow op's product-path ratios on a host: the op inside tf.function
(allreduce.py --api tf --tf-floor) beside the core's own reduction of the same kind of
buffers (--api gradients-tfmem: mc.gradients on copies in TensorFlow's memory, one
allocation per tensor, as the op's inputs are), alternated run by run, 2 ranks.

An op that added nothing to the core's reduction but TensorFlow's call floor would reach
(t_floor + t_MPI) / (t_floor + t_core), t_MPI and t_core from the same run; where that
bound is below a target of benchmarks/product_targets.py, no change to the op meets the
target on that host: only the reduction itself could.

    python3 benchmarks/op_bound.py --runs 3 --out benchmarks/results/op_bound_intel

Prints one markdown table: per case, median (min-max) over the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from product_targets import CASES, run_case

TARGETS = ("resnet50", "64x1M")


def core_case(name: str) -> str:
    """The product_targets case with the op replaced by mc.gradients in TensorFlow's memory."""
    args, _, target = CASES[name]
    core = [a for a in args if a != "--tf-floor"]
    core[core.index("tf")] = "gradients-tfmem"
    CASES[f"{name}-core"] = (core, False, target)
    return f"{name}-core"


def row(out: Path, name: str, run: int) -> dict:
    (r,) = json.loads((out / f"{name}_r{run}.json").read_text())["rows"]
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("/tmp/ml_comm-op-bound"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = [(name, core_case(name)) for name in TARGETS]
    for run in range(args.runs):
        order = [n for pair in pairs for n in pair]
        for name in order if run % 2 == 0 else reversed(order):
            run_case(name, args.out, run)
    columns = {"op": [], "core": [], "bound": []}
    print(
        "| case | op: (floor + MPI) / op | core: MPI / core "
        "| bound: (floor + MPI) / (floor + core) | target |\n|---|---:|---:|---:|---:|"
    )
    for name, core in pairs:
        for values in columns.values():
            values.clear()
        for run in range(args.runs):
            op, own = row(args.out, name, run), row(args.out, core, run)
            floor = op["tf_floor_time_us"]
            columns["op"].append((floor + op["mpi_time_us"]) / op["mlcomm_time_us"])
            columns["core"].append(own["mpi_time_us"] / own["mlcomm_time_us"])
            columns["bound"].append((floor + own["mpi_time_us"]) / (floor + own["mlcomm_time_us"]))
        cells = [
            f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for v in columns.values()
        ]
        print(f"| {name} | {' | '.join(cells)} | >= {CASES[name][2]:.2f} |")


if __name__ == "__main__":
    main()
