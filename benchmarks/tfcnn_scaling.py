"""Scaling of upstream tf_cnn_benchmarks with --variable_update=ps_ml_comm.

    .venv/bin/python benchmarks/tfcnn_scaling.py --upstream /path/to/benchmarks \\
        --model resnet50 --batch-size 32 --num-batches 50 --rounds 3

Runs four configurations, interleaved round by round so that the machine's noise
hits all alike: `independent` (no communication) and `ps_ml_comm`, each at 1 and
at 2 ranks (--ranks changes the set). Every rank gets the same core budget at
every rank count: --num_intra_threads=--cores-per-rank (default: the machine's
cores divided by the largest rank count), --num_inter_threads=--inter-threads,
OMP_NUM_THREADS=--cores-per-rank. The ml_comm threads come on top of that budget,
unless --bind pins each rank, ml_comm's threads included, to its budget of cores
(`mpiexec -bind-to core:<budget>`).

Throughput is the sum over ranks of each rank's images/sec ("total images/sec" of
each rank for independent, ml_comm's summed line for ps_ml_comm); a table cell is
the median over rounds. Efficiency = ps_ml_comm at n ranks / (n x independent at
1 rank); "vs independent" = ps_ml_comm / independent at the same rank count
(what communication costs when the ranks compete for the same machine alike).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = ("independent", "ps_ml_comm")
PY = Path(sys.executable)
MPIEXEC = PY.parent / "mpiexec"


def upstream_script(root: Path) -> Path:
    for d in (root, root / "scripts" / "tf_cnn_benchmarks"):
        if (d / "tf_cnn_benchmarks.py").is_file():
            return d / "tf_cnn_benchmarks.py"
    sys.exit(f"no tf_cnn_benchmarks.py under {root}")


def command(args, mode: str, nranks: int, script: Path, outdir: str) -> list[str]:
    # Each rank's stdout in its own file: lines of different ranks never mix.
    launch = [str(MPIEXEC), "-outfile-pattern", f"{outdir}/out.%r", "-n", str(nranks)]
    if args.bind:
        launch += ["-bind-to", f"core:{args.cores_per_rank}"]
    flags = [
        f"--variable_update={mode}",
        f"--model={args.model}",
        "--device=cpu",
        "--data_format=NHWC",
        f"--batch_size={args.batch_size}",
        f"--num_batches={args.num_batches}",
        f"--num_warmup_batches={args.warmup}",
        f"--num_intra_threads={args.cores_per_rank}",
        f"--num_inter_threads={args.inter_threads}",
    ]
    if mode == "ps_ml_comm":
        flags.append(f"--number_ml_comm_threads={args.threads}")
    # Both modes through ml_comm's wrapper, which adds ps_ml_comm (docs/tfcnn.md): the same
    # start-up for each.
    return [*launch, str(PY), "-m", "ml_comm.tfcnn", script.name, *flags]


def throughput(outs: list[str], mode: str) -> float:
    """images/sec summed over the ranks, from each rank's stdout."""
    if mode == "ps_ml_comm":
        m = re.search(r"^ml_comm: total images/sec over \d+ ranks[^:]*: ([\d.]+)", outs[0], re.M)
        if not m:
            raise ValueError("no ml_comm total line on rank 0")
        return float(m.group(1))
    rates = [re.search(r"^total images/sec: ([\d.]+)", out, re.M) for out in outs]
    if not all(rates):
        raise ValueError("a rank printed no total images/sec")
    return sum(float(m.group(1)) for m in rates)


def run(cmd: list[str], cwd: Path, env: dict, timeout: float, outdir: str, n: int) -> list[str]:
    err = subprocess.PIPE
    proc = subprocess.run(cmd, cwd=cwd, env=env, stderr=err, text=True, timeout=timeout)
    outs = [Path(outdir, f"out.{r}").read_text() for r in range(n)]
    if proc.returncode != 0:
        sys.exit(
            f"failed (exit {proc.returncode}): {' '.join(cmd)}\n{outs[0][-2000:]}"
            f"{proc.stderr[-4000:]}"
        )
    return outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--upstream", type=Path, default=os.environ.get("TF_CNN_BENCHMARKS_DIR"))
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--num-batches", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--cores-per-rank", type=int, default=0, help="0: cores / max(--ranks)")
    ap.add_argument("--inter-threads", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="--number_ml_comm_threads")
    ap.add_argument("--bind", action="store_true", help="mpiexec -bind-to core:<budget>")
    ap.add_argument("--timeout", type=float, default=3600, help="per run, seconds")
    args = ap.parse_args()
    if args.upstream is None:
        sys.exit("--upstream (or TF_CNN_BENCHMARKS_DIR): a checkout of tensorflow/benchmarks")
    script = upstream_script(args.upstream)
    if args.cores_per_rank <= 0:
        args.cores_per_rank = max(1, (os.cpu_count() or 1) // max(args.ranks))
    env = {
        **os.environ,
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "OMP_NUM_THREADS": str(args.cores_per_rank),
    }
    configs = [(n, mode) for n in args.ranks for mode in MODES]
    print(
        f"# tf_cnn_benchmarks scaling: {args.model}, batch {args.batch_size}/rank, "
        f"{args.num_batches} batches after {args.warmup} warm-up, {args.rounds} round(s)"
    )
    print(
        f"# host {platform.node()}: {os.cpu_count()} cores; per rank: "
        f"{args.cores_per_rank} intra-op, {args.inter_threads} inter-op threads, "
        f"{args.threads} ml_comm thread(s); bind={args.bind}"
    )
    print(f"# upstream {script}")
    results: dict[tuple[int, str], list[float]] = {c: [] for c in configs}
    for r in range(args.rounds):
        for n, mode in configs:
            with tempfile.TemporaryDirectory() as outdir:
                cmd = command(args, mode, n, script, outdir)
                if r == 0:
                    print("# " + " ".join(cmd[cmd.index(str(PY)) :]).replace(str(PY), "python"))
                rate = throughput(run(cmd, script.parent, env, args.timeout, outdir, n), mode)
            results[(n, mode)].append(rate)
            print(f"# round {r + 1}: {n} rank(s) {mode}: {rate:.2f} images/sec", flush=True)

    base = statistics.median(results[(min(args.ranks), "independent")]) / min(args.ranks)
    print()
    print("| ranks | variable_update | images/sec | all rounds | efficiency | vs independent |")
    print("|---:|---|---:|---|---:|---:|")
    for n, mode in configs:
        med = statistics.median(results[(n, mode)])
        runs = ", ".join(f"{x:.2f}" for x in results[(n, mode)])
        eff = med / (n * base)
        vs = med / statistics.median(results[(n, "independent")])
        print(f"| {n} | {mode} | {med:.2f} | {runs} | {eff:.2f} | {vs:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
