"""`python -m ml_comm.horovod.run -np 4 [-H host1:2,host2:2] [--mpi] python train.py ...`:
horovodrun's common flags, run through the MPI launcher (mpiexec) or, inside a Slurm
allocation without -H, srun. The command runs under `python -m ml_comm.horovod` when it
starts with python, so its `horovod` imports need no change."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="horovodrun (ml_comm)", allow_abbrev=False)
    p.add_argument("-np", "--num-proc", dest="np", type=int, required=True)
    p.add_argument("-H", "--hosts", dest="hosts", default=None)
    p.add_argument("--mpi", action="store_true", help="use the MPI launcher (the default)")
    p.add_argument("--gloo", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.gloo:
        p.error("--gloo: ml_comm runs over MPI only; leave it out (or pass --mpi)")
    if not args.command:
        p.error("name the command to run, e.g. python train.py")
    if args.np < 1:
        p.error(f"-np must be at least 1, got {args.np}")
    return args


def command(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    program = list(args.command)
    if os.path.basename(program[0]).startswith("python") and program[1:2] != ["-m"]:
        program = [program[0], "-m", "ml_comm.horovod", *program[1:]]
    if "SLURM_JOB_ID" in env and args.hosts is None and shutil.which("srun"):
        return ["srun", f"--ntasks={args.np}", *program]
    launcher = (
        shutil.which(
            "mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        )
        or "mpiexec"
    )
    hosts = ["-hosts", args.hosts] if args.hosts else []
    return [launcher, "-n", str(args.np), *hosts, *program]


def main(argv: list[str]) -> int:
    args = parse(argv)
    return subprocess.call(command(args, dict(os.environ)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
