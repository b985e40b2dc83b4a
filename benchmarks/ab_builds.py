"""Same-machine A/B of two builds of ml_comm: benchmarks/allreduce.py alternately on each.

    .venv/bin/python benchmarks/ab_builds.py --a /path/to/old/checkout --b . --rounds 4 -- -e 64M

--a/--b name checkouts whose `ml_comm` package (with its built `_core`) is imported (first
on PYTHONPATH); everything after `--` goes to allreduce.py. Rounds alternate A, B, B, A, ...
so drifting machine load hits both alike. Each run already compares ml_comm with
MPI_Allreduce in the same process (its ratio column); this script reports, per size, the
median of those ratios for A and for B, and B/A: below 1 means B is slower than A relative to
the same MPI. The allreduce.py JSON of every run is kept in --out (`--table-of FOLDER` prints
the table of such a folder again; --floor, for runs with allreduce.py --tf-floor, takes the
ratio as benchmarks/product_targets.py does: (t_floor + t_MPI) / t_ml_comm). On the test
bed, --launch starts the ranks instead of `mpiexec -n N` (srun passes PYTHONPATH on):

    .venv/bin/python benchmarks/ab_builds.py --a OLD --b . --launch "srun -N 2 \\
        --ntasks-per-node=1 --mpi=pmi2 --time=10 tools/pin_to_node_core.sh" -- --api gradients
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def row_ratio(row: dict, floor: bool) -> float:
    if not floor:
        return row["ratio"]
    return (row["tf_floor_time_us"] + row["mpi_time_us"]) / row["mlcomm_time_us"]


def run_once(checkout: Path, launch: list[str], extra: list[str], out: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    cmd = [*launch, sys.executable, str(HERE / "allreduce.py"), "--json", str(out), *extra]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    return json.loads(out.read_text())["rows"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", type=Path, help="checkout A (the baseline)")
    p.add_argument("--b", type=Path, help="checkout B")
    p.add_argument("--table-of", type=Path, help="only the table of the runs kept in this folder")
    p.add_argument("--rounds", type=int, default=4, help="runs of each build (4)")
    p.add_argument("-n", "--nranks", type=int, default=2)
    p.add_argument("--launch", help="what starts the ranks (default: this venv's mpiexec -n N)")
    p.add_argument("--out", type=Path, default=Path("ab-runs"), help="folder for the JSON runs")
    p.add_argument("--floor", action="store_true", help="ratio with TensorFlow's call floor")
    p.add_argument("extra", nargs="*", help="arguments for allreduce.py (after --)")
    args = p.parse_args()
    ratios: dict[str, dict[int, list[float]]] = {"A": {}, "B": {}}
    if args.table_of:
        for name in ratios:
            for run in sorted(args.table_of.glob(f"{name}*.json")):
                for row in json.loads(run.read_text())["rows"]:
                    ratios[name].setdefault(row["bytes"], []).append(row_ratio(row, args.floor))
        print(f"# the runs in {args.table_of}")
    else:
        if not (args.a and args.b):
            p.error("--a and --b name the two checkouts (or --table-of a folder of runs)")
        args.out.mkdir(parents=True, exist_ok=True)
        mpiexec = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(args.nranks)]
        launch = shlex.split(args.launch) if args.launch else mpiexec
        for i in range(args.rounds):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            for name in order:
                checkout = args.a if name == "A" else args.b
                rows = run_once(checkout, launch, args.extra, args.out / f"{name}{i}.json")
                for row in rows:
                    ratios[name].setdefault(row["bytes"], []).append(row_ratio(row, args.floor))
                print(f"# round {i} {name} done", flush=True)
        print(f"# A = {args.a}, B = {args.b}, {args.rounds} runs each, by {shlex.join(launch)}")
    defined = "(t_floor + t_MPI) / t_ml_comm" if args.floor else "t_MPI / t_ml_comm"
    print(f"# {'bytes':>12} {'A ratio':>9} {'B ratio':>9} {'B/A':>7}   (ratio = {defined})")
    for nbytes in sorted(ratios["A"]):
        a, b = statistics.median(ratios["A"][nbytes]), statistics.median(ratios["B"][nbytes])
        print(f"  {nbytes:>12} {a:9.3f} {b:9.3f} {b / a:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
