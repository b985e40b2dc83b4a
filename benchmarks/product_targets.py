"""The product path's three targets, each against MPI_Allreduce on the same MPI in the same
run (benchmarks/allreduce.py at 2 ranks, repeated), with the median and spread over the runs:

- small:     mc.gradients of one 8-byte array: t_MPI / t_ml_comm, target >= 1 / 1.5 (ml_comm
             within 1.5 times MPI_Allreduce's time);
- resnet50:  the TensorFlow op inside tf.function on ResNet-50's 214 gradients: (t_floor +
             t_MPI) / t_ml_comm, target >= 1.4, where t_floor is the same tf.function without
             ml_comm (what calling it costs TensorFlow);
- 64x1M:     the same on 64 tensors of 1 MiB: target >= 1.5;
- resnet50-tfmem, 64x1M-tfmem: the same two with MPI_Allreduce in memory that TensorFlow
             allocated, as the op's inputs are (allreduce.py --mpi-memory tensorflow): in
             resnet50 and 64x1M MPI works in NumPy's huge pages while the op gets TensorFlow's
             4 KiB pages, which a shared-memory MPI reads more slowly.

    python3 benchmarks/product_targets.py --runs 3 --out benchmarks/results/product_targets

Exit status 1 when a median misses its target. Runs alternate the cases, so that machine noise
falls on all of them alike; time them on a quiet machine (the figures are ratios of times
measured in the same run, never absolute times).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / ".venv" / "bin" / "python"
MPIEXEC = ROOT / ".venv" / "bin" / "mpiexec"
# The launch guide's advice where ranks share cores (docs/launch.md).
TF_ENV = {"TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}

# name: (allreduce.py arguments, what the ratio adds to t_MPI, target)
TIMED = ["--seconds-per-size", "6"]
CASES = {
    "small": (["--api", "gradients", "-b", "8", "-e", "8", *TIMED], False, 1 / 1.5),
    "resnet50": (["--api", "tf", "--shapes", "resnet50", "--tf-floor", *TIMED], True, 1.4),
    "64x1M": (
        ["--api", "tf", "--tensors", "64", "-b", "64M", "-e", "64M", "--tf-floor", *TIMED],
        True,
        1.5,
    ),
}
TF_MEMORY = ["--mpi-memory", "tensorflow"]
CASES["resnet50-tfmem"] = (CASES["resnet50"][0] + TF_MEMORY, True, 1.4)
CASES["64x1M-tfmem"] = (CASES["64x1M"][0] + TF_MEMORY, True, 1.5)


def ratio(row: dict, with_floor: bool) -> float:
    extra = row["tf_floor_time_us"] if with_floor else 0.0
    return (extra + row["mpi_time_us"]) / row["mlcomm_time_us"]


def run_case(name: str, out: Path, run: int) -> float:
    args, with_floor, _ = CASES[name]
    path = out / f"{name}_r{run}.json"
    cmd = [str(MPIEXEC), "-n", "2", str(PY), str(ROOT / "benchmarks" / "allreduce.py"), *args]
    cmd += ["--json", str(path)]
    env = {**os.environ, **TF_ENV}
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env, timeout=1800, stdout=subprocess.DEVNULL)
    (row,) = json.loads(path.read_text())["rows"]
    return ratio(row, with_floor)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--out", type=Path, default=Path("/tmp/ml_comm-product-targets"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.cases.split(",")
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for run in range(args.runs):
        for name in names if run % 2 == 0 else reversed(names):
            ratios[name].append(run_case(name, args.out, run))
    missed = False
    print("| case | ratio: median (min-max) | target | |\n|---|---:|---:|---|")
    for name in names:
        values, target = ratios[name], CASES[name][2]
        med = statistics.median(values)
        missed |= med < target
        print(
            f"| {name} | {med:.2f} ({min(values):.2f}-{max(values):.2f}) | >= {target:.2f} | "
            f"{'met' if med >= target else 'missed'} |"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
