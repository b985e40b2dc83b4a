"""Allreduce bandwidth sweep, ml_comm against MPI_Allreduce, in the style of nccl-tests.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/allreduce.py
    .venv/bin/mpiexec -n 4 .venv/bin/python benchmarks/allreduce.py -b 8 -e 64M -f 4 \\
        --threads 2 --chunk-bytes 256K --json out.json --plot out.png
    srun --ntasks-per-node=1 --mpi=pmi2 python benchmarks/allreduce.py      # under Slurm

For each message size (bytes; count = bytes / itemsize elements) it times, in the same run and
interleaved iteration by iteration (the order alternates, so machine noise hits both alike):

- ml_comm: the call that --api names (benchmarks/product_paths.py), on --tensors tensors that
  split the size (or, with --shapes resnet50, on ResNet-50's 214 gradients, one row):
  ``gradients`` (the default: ``mc.gradients(list)``, new results each call),
  ``gradients-tfmem`` (the same on copies in TensorFlow's memory, one allocation per tensor
  as the op's inputs have), ``tf`` (the op
  inside tf.function, the caller holding the inputs), ``tf-forwarded`` (gradients computed
  inside the function), ``average`` / ``allreduce_sum`` (in place, one buffer);
- MPI: ``comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)`` through mpi4py on the same MPI library,
  on one flat buffer of the same bytes (``--api average``: followed by an in-place multiply by
  1/nranks, which is what average costs). ``--mpi-memory tensorflow``: that buffer is memory
  TensorFlow allocated, as the op's inputs are (TensorFlow's 4 KiB pages cost a shared-memory
  MPI more per byte than NumPy's huge pages: the two then pay for the same memory).

Each iteration starts after a barrier; its time is the slowest rank's; the reported time is the
median over iterations. algbw = bytes / time, busbw = algbw * 2(n-1)/n (the bytes each rank's
link carries in a bandwidth-optimal allreduce, comparable across rank counts), in GB/s (1e9).
ratio = time_MPI / time_ml_comm (= busbw_ml_comm / busbw_MPI): above 1 means ml_comm is faster.

Before timing a size, one verification iteration per implementation fills element i on rank r
with (i % 13) + r, an integer-valued float whose sum is exact, and counts the elements that differ
from the known result (#wrong; where the api averages, every --api but allreduce_sum, the
result is a half-integer and one ulp is allowed, since x * (1/n) and x / n may round
differently). Any #wrong > 0 makes the exit status 1.
With --compression bf16 or fp16 these sums and averages (at most a few hundred, in halves) are
16-bit values too, so the check stays exact.
The timed iterations then run on zeros, so in-place sums cannot overflow however many iterations
run. Iteration counts adapt to the size unless --iters is given: after the warmup, as many
iterations as fit in --seconds-per-size, between --min-iters and --max-iters.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import resource
import shlex
import socket
import sys
import time
from pathlib import Path

import numpy as np

import ml_comm as mc

# The arrays averaged here are no model's gradients: there are no weights to share.
os.environ.setdefault("ML_COMM_WEIGHTS_CHECK", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import product_paths  # noqa: E402

DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64}
ALGS = {
    "auto": "ALG_AUTO",
    "ring": "ALG_RING",
    "rd": "ALG_RECURSIVE_DOUBLING",
    "rabenseifner": "ALG_RABENSEIFNER",
}
PATTERN_PERIOD = 13
# Verification works in blocks this long (a multiple of the period: each block restarts it).
BLOCK = PATTERN_PERIOD * (1 << 16)


def parse_bytes(text: str) -> int:
    """'8', '4K', '1M', '256M', '1G' (powers of 1024) -> bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8, 64K, 256M)") from None
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}")
    return int(value)


def human_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    a = p.add_argument
    a("-b", "--min-bytes", type=parse_bytes, default=8, help="smallest size (8)")
    a("-e", "--max-bytes", type=parse_bytes, default=256 << 20, help="largest size (256M)")
    a("-f", "--factor", type=int, default=2, help="size multiplier between steps (2)")
    a("-n", "--iters", type=int, default=0, help="timed iterations per size (0: adapt to size)")
    a("-w", "--warmup", type=int, default=-1, help="warmup iterations (-1: adapt to size)")
    a("--seconds-per-size", type=float, default=1.0, help="target time per size when adapting")
    a("--min-iters", type=int, default=10, help="fewest timed iterations when adapting (10)")
    a("--max-iters", type=int, default=1000, help="most timed iterations when adapting (1000)")
    a("-t", "--threads", type=int, default=2, help="ml_comm threads per team (2)")
    a("--chunk-bytes", type=parse_bytes, default=None, help="ml_comm ring segment size")
    a("--alg", choices=sorted(ALGS), default="auto", help="ml_comm algorithm (auto)")
    a(
        "--compression",
        choices=("none", "bf16", "fp16"),
        default=None,
        help="16-bit values on ml_comm's wire for float32 ring reductions (default: "
        "ML_COMM_COMPRESSION, else none); MPI_Allreduce stays float32",
    )
    a("--api", choices=product_paths.APIS, default="gradients", help="ml_comm call (gradients)")
    a("--tensors", type=int, default=1, help="tensors each size is split into (1)")
    a(
        "--tf-floor",
        action="store_true",
        help="tf/tf-forwarded: also time the same tf.function without ml_comm (tf_floor columns:"
        " its time, and t_MPI over it, the ratio an op that cost nothing would reach)",
    )
    a(
        "--mpi-memory",
        choices=("numpy", "tensorflow"),
        default="numpy",
        help="MPI_Allreduce's buffer: NumPy's (default) or TensorFlow's memory, as the tf "
        "op's inputs",
    )
    a("--shapes", choices=("resnet50",), help="one row: this model's gradient list instead")
    a("-d", "--dtype", choices=sorted(DTYPES), default="float32", help="element type (float32)")
    a("--json", metavar="PATH", help="write the header and per-size rows as JSON")
    a("--plot", metavar="PNG", help="write a plot (benchmarks/plot.py) of this run")
    args = p.parse_args(argv)
    if args.factor < 2:
        p.error("--factor must be >= 2")
    if args.min_bytes > args.max_bytes:
        p.error("--min-bytes must not exceed --max-bytes")
    averages = args.api not in ("allreduce_sum",)
    if averages and not args.dtype.startswith("float"):
        p.error(f"--api {args.api} averages: it needs a floating-point --dtype")
    if args.tensors < 1:
        p.error("--tensors must be at least 1")
    on_tf_memory = args.api.startswith("tf") or args.api == "gradients-tfmem"
    if args.mpi_memory == "tensorflow" and not on_tf_memory:
        p.error("--mpi-memory tensorflow compares with the apis on TensorFlow's memory")
    if args.tf_floor and not args.api.startswith("tf"):
        p.error("--tf-floor goes with --api tf or tf-forwarded")
    args.op = "average" if averages else "sum"
    return args


def sizes_in_bytes(args: argparse.Namespace, itemsize: int) -> list[int]:
    sizes, size = [], max(args.min_bytes, itemsize)
    while size <= args.max_bytes:
        sizes.append(size - size % itemsize)
        size *= args.factor
    return sizes


def fill_pattern(buf: np.ndarray, rank: int, tile: np.ndarray) -> None:
    """buf[i] = (i % 13) + rank."""
    for off in range(0, len(buf), BLOCK):
        part = buf[off : off + BLOCK]
        np.add(tile[: len(part)], rank, out=part, casting="unsafe")


def count_wrong(buf: np.ndarray, nranks: int, op: str, tile: np.ndarray, scale: int = 1) -> int:
    """Elements that differ from scale * sum_r ((i % 13) + r) (or its average, within one ulp)."""
    wrong = 0
    offset = nranks * (nranks - 1) // 2
    for off in range(0, len(buf), BLOCK):
        part = buf[off : off + BLOCK]
        expected = (tile[: len(part)].astype(np.float64) * nranks + offset) * scale
        if op == "average":
            expected = (expected / nranks).astype(buf.dtype)
            wrong += int(np.count_nonzero(np.abs(part - expected) > np.spacing(expected)))
        else:
            wrong += int(np.count_nonzero(part != expected.astype(buf.dtype)))
    return wrong


def default_warmup(nbytes: int) -> int:
    return 10 if nbytes <= 1 << 20 else 3 if nbytes <= 32 << 20 else 2


def placement(comm) -> list[str]:
    """'host:cpus' of every rank, in rank order: which node and cores each rank ran on, so a
    pinned run (taskset, --cpu-bind) says in its own header where its ranks were."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    mine = f"{socket.gethostname()}:{','.join(map(str, cpus)) or '?'}"
    return comm.allgather(mine)


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def header_fields(args, nranks: int, ranks_on: list[str]) -> dict:
    from mpi4py import MPI

    info = mc.version_info()
    mpi_version = str(info.get("mpi_library") or MPI.Get_library_version()).strip()
    mpi_version = " ".join(mpi_version.splitlines()[0].split()) if mpi_version else ""
    settings = mc.team_settings(0)
    return {
        "benchmark": "allreduce",
        "ml_comm_version": info.get("ml_comm", info.get("version")),
        "version_info": {k: str(v) for k, v in info.items()},
        "mpi_library": mpi_version,
        "thread_level": str(info.get("thread_level", "")),
        "mpi4py": __import__("mpi4py").__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "nranks": nranks,
        "threads_per_team": args.threads,
        "chunk_bytes": settings["chunk_bytes"],
        "latency_bytes": settings["latency_bytes"],
        "inline_bytes": settings["inline_bytes"],
        "alg": args.alg,
        "compression": settings.get("compression", "none"),
        "op": args.op,
        "api": args.api,
        "tensors": "resnet50" if args.shapes else args.tensors,
        "mpi_memory": args.mpi_memory,
        "dtype": args.dtype,
        "iters": args.iters or "auto",
        "warmup": args.warmup if args.warmup >= 0 else "auto",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "placement": ranks_on,
        "command": shlex.join([sys.executable, *sys.argv]),
        # glibc's malloc settings decide whether MPI's temporary buffers fault every call
        "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
    }


def print_header(h: dict) -> None:
    chunk, latency = human_bytes(h["chunk_bytes"]), human_bytes(h["latency_bytes"])
    print(f"# ml_comm allreduce benchmark: ml_comm {h['ml_comm_version']} vs MPI_Allreduce")
    print(f"# MPI library: {h['mpi_library']} (thread level {h['thread_level']})")
    print(f"# mpi4py {h['mpi4py']}, numpy {h['numpy']}, python {h['python']}")
    print(
        f"# nranks {h['nranks']}, threads/team {h['threads_per_team']}, chunk {chunk}, "
        f"latency path below {latency}, caller's thread up to {human_bytes(h['inline_bytes'])}, "
        f"alg {h['alg']}, compression {h.get('compression', 'none')}, api {h['api']}, "
        f"tensors {h['tensors']}, dtype {h['dtype']}, "
        f"iters {h['iters']}, "
        f"warmup {h['warmup']}"
    )
    print(f"# date {h['date']}, host {h['hostname']}")
    if "placement" in h:
        print(f"# ranks on (host:cpus): {' '.join(h['placement'])}")
    print(f"# command: {h['command']}")
    print("#")
    columns = (
        f"# {'':>31} {' ml_comm ':-^33} {' MPI_Allreduce ':-^33}",
        f"# {'size':>10} {'count':>12} {'type':>7}"
        f" {'time':>10} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
        f" {'time':>10} {'algbw':>7} {'busbw':>7} {'#wrong':>6} {'ratio':>6} {'iters':>6}",
        f"# {'(B)':>10} {'(elements)':>12} {'':>7}"
        f" {'(us)':>10} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}"
        f" {'(us)':>10} {'(GB/s)':>7} {'(GB/s)':>7}",
    )
    print("\n".join(line.rstrip() for line in columns), flush=True)


def format_row(r: dict) -> str:
    def part(p: str) -> str:
        return (
            f" {r[p + '_time_us']:10.1f} {r[p + '_algbw']:7.3f} {r[p + '_busbw']:7.3f}"
            f" {r[p + '_wrong']:6d}"
        )

    return (
        f"  {r['bytes']:>10d} {r['count']:>12d} {r['dtype']:>7}"
        + part("mlcomm")
        + part("mpi")
        + f" {r['ratio']:6.2f} {r['iters']:6d}"
        + (
            f"  floor {r['tf_floor_time_us']:.1f} us {r['tf_floor_ratio']:.2f}"
            if "tf_floor_ratio" in r
            else ""
        )
        + (
            f"  faults/call {r['mlcomm_faults_per_call']:.0f} MPI {r['mpi_faults_per_call']:.0f}"
            if max(r.get("mlcomm_faults_per_call", 0), r.get("mpi_faults_per_call", 0)) >= 1
            else ""
        )
    )


class Bench:
    """One sweep: the buffers (allocated once, at the largest size) and both implementations."""

    def __init__(self, args: argparse.Namespace, comm) -> None:
        from mpi4py import MPI

        self.MPI, self.comm, self.args = MPI, comm, args
        self.rank, self.nranks = comm.Get_rank(), comm.Get_size()
        self.dtype = np.dtype(DTYPES[args.dtype])
        self.shapes = product_paths.resnet50_shapes() if args.shapes else None
        if self.shapes:
            count = sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes)
            self.sizes = [count * self.dtype.itemsize]
        else:
            self.sizes = sizes_in_bytes(args, self.dtype.itemsize)
        count = max(self.sizes) // self.dtype.itemsize
        if args.mpi_memory == "tensorflow":
            self.buf = product_paths.tensorflow_memory(count, self.dtype)
        else:
            self.buf = np.zeros(count, dtype=self.dtype)
        self.tile = (np.arange(BLOCK) % PATTERN_PERIOD).astype(self.dtype)
        self.api = product_paths.make(args.api)
        # MPI averages only where ml_comm's call is an in-place average of the same buffer.
        self.scale = self.dtype.type(1.0 / self.nranks) if args.api == "average" else None

    def bind(self, b: np.ndarray) -> None:
        shapes = self.shapes or product_paths.equal_shapes(len(b), self.args.tensors)
        self.api.bind(b, product_paths.split(b, shapes))

    def run_mlcomm(self, b: np.ndarray) -> None:
        self.api.run()

    def run_floor(self, b: np.ndarray) -> None:
        self.api.floor()

    def run_mpi(self, b: np.ndarray) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, b, op=self.MPI.SUM)
        if self.scale is not None:
            np.multiply(b, self.scale, out=b)

    def verify(self, fn, b: np.ndarray, mine: bool) -> int:
        """One checked iteration; the number of wrong elements summed over ranks."""
        fill_pattern(b, self.rank, self.tile)
        if mine:
            self.bind(b)
        self.comm.Barrier()
        fn(b)
        if not mine:
            wrong = count_wrong(b, self.nranks, "average" if self.scale else "sum", self.tile)
        else:
            op = "average" if self.api.expect_average else "sum"
            wrong = count_wrong(self.api.result(), self.nranks, op, self.tile, self.api.scale)
        return self.comm.allreduce(wrong)

    def timed(self, b: np.ndarray, n: int, first: int) -> tuple[np.ndarray, np.ndarray, float]:
        """n interleaved iterations -> (slowest rank's times [impl, iter] in s, the most
        page faults per call of any rank [impl], wall s). Faults are counted outside the
        timed region: MPI's large allreduce takes a fresh temporary buffer each call."""
        fns = [self.run_mlcomm, self.run_mpi]
        if self.args.tf_floor:
            fns.append(self.run_floor)
        times = np.zeros((len(fns), n))
        faults = np.zeros(len(fns))
        clock, barrier = time.perf_counter, self.comm.Barrier
        wall = clock()
        order = list(range(len(fns)))
        for it in range(n):
            for k in order if (first + it) % 2 == 0 else order[::-1]:
                barrier()
                f0 = minor_faults()
                t0 = clock()
                fns[k](b)
                times[k, it] = clock() - t0
                faults[k] += minor_faults() - f0
        wall = self.comm.allreduce(clock() - wall, op=self.MPI.MAX)
        if n:
            self.comm.Allreduce(self.MPI.IN_PLACE, times, op=self.MPI.MAX)
            faults /= n
            self.comm.Allreduce(self.MPI.IN_PLACE, faults, op=self.MPI.MAX)
        return times, faults, wall

    def one_size(self, nbytes: int) -> dict:
        args, count = self.args, nbytes // self.dtype.itemsize
        b = self.buf[:count]
        wrong_ml = self.verify(self.run_mlcomm, b, mine=True)
        wrong_mpi = self.verify(self.run_mpi, b, mine=False)
        b[:] = 0
        self.bind(b)  # timed on zeros, so in-place sums cannot overflow
        warmup = args.warmup if args.warmup >= 0 else default_warmup(nbytes)
        _, _, wall = self.timed(b, warmup, 0)
        iters = args.iters
        if iters <= 0:
            per_iter = wall / warmup if warmup else 0.0
            iters = int(args.seconds_per_size / per_iter) if per_iter > 0 else args.max_iters
            iters = max(args.min_iters, min(args.max_iters, iters))
        times, faults, _ = self.timed(b, iters, warmup)
        t_ml, t_mpi = (float(np.median(t)) for t in times[:2])
        row = {"bytes": nbytes, "count": count, "dtype": args.dtype, "iters": iters}
        row["warmup"] = warmup
        bus = 2 * (self.nranks - 1) / self.nranks
        for name, t, wrong, ts in (
            ("mlcomm", t_ml, wrong_ml, times[0]),
            ("mpi", t_mpi, wrong_mpi, times[1]),
        ):
            algbw = nbytes / t / 1e9 if t > 0 else 0.0
            row[f"{name}_time_us"] = t * 1e6
            row[f"{name}_time_us_min"] = float(ts.min()) * 1e6
            row[f"{name}_time_us_max"] = float(ts.max()) * 1e6
            row[f"{name}_algbw"] = algbw
            row[f"{name}_busbw"] = algbw * bus
            row[f"{name}_wrong"] = int(wrong)
        row["ratio"] = t_mpi / t_ml if t_ml > 0 else float("nan")
        row["mlcomm_faults_per_call"], row["mpi_faults_per_call"] = (float(f) for f in faults[:2])
        if len(times) > 2:
            t_floor = float(np.median(times[2]))
            row["tf_floor_time_us"] = t_floor * 1e6
            row["tf_floor_ratio"] = t_mpi / t_floor if t_floor > 0 else float("nan")
        return row


def load_plot_module():
    spec = importlib.util.spec_from_file_location(
        "ml_comm_bench_plot", Path(__file__).resolve().with_name("plot.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mc.init_mpi()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    bench = Bench(args, comm)
    init_kwargs = {"chunk_bytes": args.chunk_bytes} if args.chunk_bytes else {}
    mc.init(args.threads, 1, len(bench.buf), **init_kwargs, **bench.api.init_kwargs)
    forever = 1 << 30  # ksteps >= max_steps: always synchronous
    alg = getattr(mc, ALGS[args.alg])
    # Only when asked: a build from before compression (an A/B's baseline) lacks the keyword.
    extra = {"compression": args.compression} if args.compression else {}
    mc.config_team(0, alg, forever, forever, **extra)

    header = header_fields(args, nranks, placement(comm))
    if rank == 0:
        print_header(header)
    rows = []
    t_start = time.perf_counter()
    for nbytes in bench.sizes:
        rows.append(bench.one_size(nbytes))
        if rank == 0:
            print(format_row(rows[-1]), flush=True)
    elapsed = time.perf_counter() - t_start

    total_wrong = sum(r["mlcomm_wrong"] + r["mpi_wrong"] for r in rows)
    if rank == 0:
        avg_ml = np.mean([r["mlcomm_busbw"] for r in rows])
        avg_mpi = np.mean([r["mpi_busbw"] for r in rows])
        print("#")
        print(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        print(f"# Avg bus bandwidth    : ml_comm {avg_ml:.4f} GB/s, MPI {avg_mpi:.4f} GB/s")
        print(f"# Sweep time           : {elapsed:.1f} s", flush=True)
        result = {"header": header, "rows": rows, "wrong_total": total_wrong}
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
            os.replace(tmp, args.json)
            print(f"# wrote {args.json}", flush=True)
        if args.plot:
            try:
                load_plot_module().write_plot([(args.json or "this run", result)], args.plot)
                print(f"# wrote {args.plot}", flush=True)
            except ImportError as e:
                print(f"# no plot: {e} (pip install matplotlib)", flush=True)
    mc.finalize()
    return 0 if total_wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
