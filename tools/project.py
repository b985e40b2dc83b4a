"""The scale model: ml_comm's own algorithms on a calibrated SimGrid platform.

    python3 tools/dev.py project --calibrate            # writes model/calibration.json
    python3 tools/dev.py project --validate [--small]   # 2-node calibration against 3-4 nodes
    python3 tools/dev.py project --platform aries --model resnet50 --nodes 2,16,128,1024 \
        --json FILE [--png FILE]

docs/scale.md says what it models and what it cannot see. Only the standard library
(and matplotlib for --png) is used.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import project_platforms as platforms
from simgrid_packages import ensure_simgrid

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "model"
MLCSIM = BUILD / "mlcsim"
KERNEL_SPEED = BUILD / "kernel_speed"
CALIBRATION = ROOT / "model" / "calibration.json"
RESULTS = ROOT / "benchmarks" / "results"
# The test-bed runs the calibration reads (2 nodes) and the validation compares with (3, 4).
SWEEP_2 = RESULTS / "testbed_2gbit_t1.json"
# The 2-node ping-pong (benchmarks/pingpong.py): latency and per-message CPU.
PINGPONG = RESULTS / "testbed_2gbit_pingpong.json"
# The core's kernels timed on this machine (--measure-kernels).
KERNELS = RESULTS / "kernel_speed.json"
# Training runs at 2 nodes (benchmarks/RESULTS.md "Training throughput and scaling"):
# rate, batch -> the summary; the timelines of the batch-8 runs at 2 Gbit/s give the
# gradients' sizes and the order and times of their arrival in backprop.
TRAININGS = {
    ("2gbit", 8): RESULTS / "train_scaling_2gbit_b8_slice_100us.json",
    ("1gbit", 8): RESULTS / "train_scaling_1gbit_b8_slice_100us.json",
    ("2gbit", 32): RESULTS / "train_scaling_2gbit_b32_slice_100us.json",
}
TRACE = RESULTS / "train_scaling_2gbit_b8_slice_100us_traces" / "mlcomm-sync_n2_rep1.rank0.json"
# CPU of the kernel's TCP per byte sent or received: 13.7-15.4 ms per step moving
# 19,612,968 B each way (the 2-node measurement in this file).
TCP_CPU = RESULTS / "threads_cpu_tcp_floor_s11.txt"
# Per-step times of 1-node trainings with no communication (`local`, 2 test-bed nodes at
# once, each on its own core): the spread the projection's jitter draws from.
STEP_TIMES = sorted((RESULTS / "step_times_local_b8").glob("r*/rank*.json"))
SWEEPS = {n: sorted((RESULTS / "testbed_quiet").glob(f"{n}node_gradients_r*.json")) for n in (3, 4)}
# The same sweeps with MPICH's temporary buffer kept mapped (GLIBC_TUNABLES: malloc maps
# no fresh buffer and keeps what is freed), which is what SMPI assumes.
SWEEPS_KEPT = {
    n: sorted((RESULTS / "testbed_quiet").glob(f"{n}node_gradients_heap_r*.json")) for n in (3, 4)
}
CORE_SOURCES = [
    "csrc/plan/plan.c",
    "csrc/base/schedule.c",
    "csrc/base/dtype.c",
    "csrc/base/tensors.c",
    "csrc/transport/post.c",
    "csrc/pipeline/pipeline.c",  # the pipelined step, as the front ends run it
]
MODEL_SOURCES = ["transport_simgrid.cpp", "kernels_timed.cpp", "team_mirror.cpp", "main.cpp"]
# maxmin/precision: SimGrid 3.32's default (1e-5) aborts a 1,024-node Rabenseifner
# allreduce ("Cannot saturate more a constraint"); 1e-4 and 1e-3 give the same times.
SIM_CFG = ["--cfg=network/model:CM02", "--cfg=maxmin/precision:1e-4", "--log=root.thres:warning"]
MIB = 1 << 20
# Steps averaged when the nodes' compute jitters (--jitter-steps). Each step waits for
# the slowest of n draws, which at 1,024 nodes come from the measured tail (1.39-1.66):
# one step's efficiency varies by several points, so the mean needs many steps.
JITTER_STEPS = 16


def build() -> None:
    """Compile the model (never part of the wheel): the core's plan, schedules and
    algorithm files unchanged, with the model's transport, kernels and team mirror."""
    why = ensure_simgrid()
    if why:
        sys.exit(f"project: SimGrid is missing: {why}")
    BUILD.mkdir(parents=True, exist_ok=True)
    sources = [ROOT / s for s in CORE_SOURCES] + sorted((ROOT / "csrc" / "algos").glob("*.c"))
    sources += [ROOT / "model" / s for s in MODEL_SOURCES]
    newest = max(p.stat().st_mtime for p in sources + list((ROOT / "model").glob("*.hpp")))
    inc = ["-I", ROOT / "csrc", "-I", ROOT / "csrc" / "include", "-I", ROOT / "csrc" / "base"]
    if not MLCSIM.exists() or MLCSIM.stat().st_mtime < newest:
        objs = []
        for src in sources:
            obj = BUILD / (src.stem + ".o")
            cc = ["gcc", "-std=c11"] if src.suffix == ".c" else ["g++", "-std=c++17"]
            flags = ["-O2", "-Wall", "-Wextra", "-DMLC_NO_CLONES", *inc, "-c", src, "-o", obj]
            subprocess.run([*cc, *flags], check=True)
            objs.append(obj)
        subprocess.run(["g++", "-o", MLCSIM, *objs, "-lsimgrid"], check=True)
    speed_src = [ROOT / "model" / "kernel_speed.c"]
    speed_src += [ROOT / "csrc" / "base" / f for f in ("reduce.c", "wire.c", "dtype.c", "clock.c")]
    if not KERNEL_SPEED.exists() or KERNEL_SPEED.stat().st_mtime < max(
        p.stat().st_mtime for p in speed_src
    ):
        flags = ["-O3", "-std=gnu11", "-Wall", "-Wextra", *inc]
        subprocess.run(["gcc", *flags, *speed_src, "-o", KERNEL_SPEED, "-lm"], check=True)


# ---- calibration ---------------------------------------------------------------------


def rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def measure_kernels() -> dict:
    """The product's float32 sum, bfloat16 rounding and a copy, timed on this machine's
    core (model/kernel_speed.c, built with the product's flags)."""
    out = subprocess.run([str(KERNEL_SPEED)], capture_output=True, text=True, check=True)
    return {**json.loads(out.stdout), "from": "model/kernel_speed on this machine"}


def recorded_kernels() -> dict:
    if not KERNELS.exists():
        sys.exit(f"project: no {KERNELS.relative_to(ROOT)}; run `tools/dev.py project "
                 "--measure-kernels`")  # fmt: skip
    return {k: v for k, v in json.loads(KERNELS.read_text()).items() if k != "from"}


def calibrate() -> dict:
    """Network and per-message costs from the 2-node ping-pong, the link rate fitted to the
    2-node sweep, node speeds as recorded by --measure-kernels (the test bed's nodes are
    namespaces of this machine: the same cores). Only recorded measurements are read, so
    the same files give the same calibration."""
    r2 = rows(SWEEP_2)
    large = [r["mlcomm_busbw"] * 1e9 for r in r2 if r["bytes"] >= MIB]
    pp = json.loads(PINGPONG.read_text())
    send, recv = pp["send_overhead_us"] * 1e-6, pp["recv_overhead_us"] * 1e-6
    half = statistics.median(
        r["half_round_trip_us"] * 1e-6 for r in pp["ping_pong"] if r["bytes"] <= 2048
    )
    if half <= send + recv:
        sys.exit(f"project: {PINGPONG.relative_to(ROOT)}: a small message's half round trip "
                 f"({half * 1e6:.1f} us) is not longer than its overheads")  # fmt: skip
    streamed = [
        r["bytes"] / (r["half_round_trip_us"] * 1e-6)
        for r in pp["ping_pong"]
        if r["bytes"] >= 8 * MIB
    ]
    kernels = recorded_kernels()
    cal = {
        "network": {
            "link_bytes_per_s": statistics.median(large),
            "latency_s": half - send - recv,
            "from": f"{PINGPONG.relative_to(ROOT)}: the latency is a small message's half "
            f"round trip ({half * 1e6:.1f} us, 8 B - 2 KiB, median) less one send and one "
            "receive overhead; the link rate fitted so that the model's 2-node sweep "
            f"({SWEEP_2.relative_to(ROOT)}) matches it from 1 MiB, because the test bed's "
            "token bucket lends each pause in sending a burst that SimGrid's links do not "
            f"model (a lone message from 8 MiB moves at {min(streamed) / 1e6:.0f}-"
            f"{max(streamed) / 1e6:.0f} MB/s)",
        },
        "node": {
            **kernels,
            "send_overhead_s": send,
            "recv_overhead_s": recv,
            "from": f"{KERNELS.relative_to(ROOT)} (model/kernel_speed.c): the core's float32 "
            "sum, bfloat16 rounding and a copy on this machine (the test bed's cores); "
            "send and receive "
            f"overheads: {PINGPONG.relative_to(ROOT)}, the CPU time per small message of "
            f"{pp['window']} sent, and {pp['window']} taken, at once",
        },
    }
    cal["node"]["cpu_per_byte_s"] = tcp_cpu_per_byte()
    cal["node"]["from"] += f"; cpu_per_byte_s: the kernel's TCP, {TCP_CPU.relative_to(ROOT)}"
    fit_link(cal, r2)
    fit_comm_weight(cal)
    cal["jitter"] = step_time_spread()
    return cal


def step_time_spread() -> dict:
    """Every measured step over its run's mean step: a node's step-to-step spread without
    the run-to-run drift of this shared machine. Pooled and sorted; the model draws one
    per node and step."""
    ratios = []
    for f in STEP_TIMES:
        steps = json.loads(f.read_text())["step_ms"]
        mean = statistics.fmean(steps)
        ratios += [round(t / mean, 4) for t in steps]
    if not ratios:
        sys.exit(
            f"project: no per-step times under {RESULTS.relative_to(ROOT)}/step_times_local_b8"
        )
    ratios.sort()
    return {
        "step_over_mean": ratios,
        "sd": round(statistics.pstdev(ratios), 4),
        "from": f"{len(ratios)} steps of {len(STEP_TIMES)} runs of "
        "benchmarks/train_scaling.py --mode local --batch 8 on 2 test-bed nodes at once "
        f"({(RESULTS / 'step_times_local_b8').relative_to(ROOT)}), each step over its run's mean",
    }


def tcp_cpu_per_byte() -> float:
    import re

    per = []
    for m in re.finditer(r"(\d+) B each way per step.*?CPU ([\d.]+) ms", TCP_CPU.read_text()):
        per.append(float(m.group(2)) * 1e-3 / (2 * int(m.group(1))))
    return statistics.median(per)


def fit_link(cal: dict, r2: list[dict]) -> None:
    """The link rate that makes the model's 2-node sweep from 1 MiB (the sizes validated)
    the measured one, in the median (the measured busbw already contains the reductions
    that the model charges on the node's core, so the link itself is faster than the
    busbw)."""
    sizes = [r["bytes"] for r in r2 if r["bytes"] >= MIB]
    real = {r["bytes"]: r["mlcomm_time_us"] * 1e-6 for r in r2}
    net = cal["network"]
    with tempfile.TemporaryDirectory() as d:
        for _ in range(4):
            link = platforms.Network(net["link_bytes_per_s"], net["latency_s"])
            plat = write_platform(platforms.platform_xml("testbed", 2, link), Path(d))
            sim = mlcsim(plat, 2, [*node_args(cal["node"]), "sweep", *map(str, sizes)])
            got = {r["bytes"]: r["time_s"] for r in sim["rows"]}
            net["link_bytes_per_s"] *= statistics.median(got[b] / real[b] for b in sizes)


def write_calibration(cal: dict) -> None:
    """model/calibration.json, the step-time samples on one line."""
    samples = cal["jitter"]["step_over_mean"]
    cal = {**cal, "jitter": {**cal["jitter"], "step_over_mean": "SAMPLES"}}
    text = json.dumps(cal, indent=1).replace('"SAMPLES"', json.dumps(samples))
    CALIBRATION.write_text(text + "\n")


def load_calibration() -> dict:
    if not CALIBRATION.exists():
        sys.exit(
            f"project: no {CALIBRATION.relative_to(ROOT)}; run `tools/dev.py project --calibrate`"
        )
    return json.loads(CALIBRATION.read_text())


# ---- running the model ---------------------------------------------------------------


def node_args(node: dict) -> list[str]:
    return [
        "--reduce-bps",
        str(node["reduce_bytes_per_s"]),
        "--convert-bps",
        str(node["convert_bytes_per_s"]),
        "--copy-bps",
        str(node["copy_bytes_per_s"]),
        "--send-overhead",
        str(node["send_overhead_s"]),
        "--recv-overhead",
        str(node["recv_overhead_s"]),
        "--cpu-per-byte",
        str(node.get("cpu_per_byte_s", 0.0)),
        "--comm-weight",
        str(node.get("comm_weight", 1.0)),
    ]


def write_platform(xml: str, tmp: Path) -> Path:
    path = tmp / "platform.xml"
    path.write_text(xml)
    return path


def mlcsim(platform: Path, nodes: int, args: list[str], timeout: float = 3600) -> dict:
    cmd = [str(MLCSIM), str(platform), "--nodes", str(nodes), *SIM_CFG, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"project: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# MPICH's MPI_Allreduce with one rank per node (its node-aware path needs several ranks on
# a node): recursive doubling up to MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE or below one element
# per rank of the power of two, else reduce-scatter and allgather (Rabenseifner). SimGrid's
# names for the two; its "mpich" selector wraps them in a two-level scheme that runs
# recursive doubling on whole vectors between nodes, 19-23 % slower than the test bed's
# MPICH at 4 nodes and 1-4 MiB, where Rabenseifner is within 6.4-9.3 %.
MPICH_SHORT_MSG_BYTES = 2048


def mpich_algorithm(nbytes: int, nodes: int) -> str:
    pof2 = 1 << (nodes.bit_length() - 1)
    return "rab_rdb" if nbytes > MPICH_SHORT_MSG_BYTES and nbytes // 4 >= pof2 else "rdb"


def smpi_allreduce(platform: Path, nodes: int, sizes: list[int], node: dict, tmp: Path) -> dict:
    """MPI_Allreduce of float32 sums as MPICH runs it, replayed by SMPI from
    time-independent traces (SMPI then shares MPICH's temporaries, so thousands of ranks
    fit in memory). Each rank's sums, (n-1)/n of the vector, cost the calibrated reduction
    speed on its core (1 Gflop/s in the platforms)."""
    hosts = tmp / "hosts"
    hosts.write_text("".join(f"node-{i}\n" for i in range(nodes)))
    times = {}
    for size in sizes:
        count = size // 4
        flops = round(4 * count * (nodes - 1) / nodes / node["reduce_bytes_per_s"] * 1e9)
        traces = tmp / f"traces_{size}"
        traces.mkdir(exist_ok=True)
        for r in range(nodes):
            (traces / f"{r}").write_text(
                f"{r} init\n{r} allreduce {count} {flops} 5\n{r} finalize\n"
            )
        listing = traces / "ranks"
        listing.write_text("".join(f"{traces / str(r)}\n" for r in range(nodes)))
        cmd = [
            "smpirun", "-np", str(nodes), "-platform", str(platform), "-hostfile", str(hosts),
            f"--cfg=smpi/allreduce:{mpich_algorithm(size, nodes)}",
            f"--cfg=smpi/os:0:{node['send_overhead_s']}:0",
            f"--cfg=smpi/or:0:{node['recv_overhead_s']}:0",
            *SIM_CFG, "--log=smpi_replay.thres:info", "-replay", str(listing),
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        found = re.findall(r"Simulation time ([0-9.e+-]+)", out.stderr)
        if out.returncode != 0 or not found:
            sys.exit(f"project: smpirun failed:\n{out.stderr[-2000:]}")
        times[size] = float(found[-1])
    return times


# ---- validation ----------------------------------------------------------------------


def measured(files: list[Path], key: str) -> dict[int, float]:
    per: dict[int, list[float]] = {}
    for f in files:
        for r in rows(f):
            per.setdefault(r["bytes"], []).append(r[key] * 1e-6)
    return {b: statistics.median(v) for b, v in per.items()}


def validate(small: bool) -> int:
    cal = load_calibration()
    net = platforms.Network(cal["network"]["link_bytes_per_s"], cal["network"]["latency_s"])
    sizes = [MIB, 4 * MIB, 16 * MIB] if small else [MIB << k for k in range(7)]
    missed: list[str] = []
    print(
        "| nodes | size | ml_comm measured | model | error "
        "| MPICH measured | MPICH (SMPI) | error |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n in (3, 4):
            plat = write_platform(platforms.platform_xml("testbed", n, net), tmp)
            sim = mlcsim(plat, n, [*node_args(cal["node"]), "sweep", *map(str, sizes)])
            model = {r["bytes"]: r["time_s"] for r in sim["rows"]}
            mpi = smpi_allreduce(plat, n, sizes, cal["node"], tmp)
            ml_real = measured(SWEEPS[n], "mlcomm_time_us")
            mpi_real = measured(SWEEPS_KEPT[n], "mpi_time_us")
            for b in sizes:
                e1 = model[b] / ml_real[b] - 1
                e2 = mpi[b] / mpi_real[b] - 1
                print(
                    f"| {n} | {b // MIB} MiB | {ml_real[b] * 1e3:.2f} ms | "
                    f"{model[b] * 1e3:.2f} ms | "
                    f"{e1:+.1%} | {mpi_real[b] * 1e3:.2f} ms | {mpi[b] * 1e3:.2f} ms | {e2:+.1%} |"
                )
                if abs(e1) > 0.05:
                    missed.append(f"ml_comm {n} nodes {b // MIB} MiB {e1:+.1%} (bar 5 %)")
                if abs(e2) > 0.10 and not small:
                    missed.append(f"MPICH {n} nodes {b // MIB} MiB {e2:+.1%} (bar 10 %)")
        if not small:
            missed += validate_training(cal, tmp)
    files = [SWEEP_2, *SWEEPS[3], *SWEEPS[4], *SWEEPS_KEPT[3], *SWEEPS_KEPT[4]]
    print(
        "calibrated on",
        PINGPONG.relative_to(ROOT),
        "and",
        SWEEP_2.relative_to(ROOT),
        "; compared with",
        ", ".join(str(f.relative_to(ROOT)) for f in files[1:]),
    )
    for m in missed:
        print("missed:", m)
    return 1 if missed else 0


def trace_profile(trace: Path) -> tuple[dict[int, int], list[tuple[int, float]], float]:
    """From a rank's timeline: elements per tensor (by layout index), the arrival order
    with each arrival's median offset from the step's first, and backprop's share of
    the step (median first-to-last arrival over median time between requests)."""
    events = json.loads(trace.read_text())["traceEvents"]
    per: dict[int, list[tuple[float, int, int]]] = {}
    for e in events:
        if e["name"] == "arrive":
            a = e["args"]
            per.setdefault(a["request"], []).append((e["ts"] * 1e-6, a["detail"], a["bytes"]))
    counts: dict[int, int] = {}
    offsets: dict[int, list[float]] = {}
    spans = []
    for arrivals in per.values():
        t0 = min(t for t, _, _ in arrivals)
        spans.append(max(t for t, _, _ in arrivals) - t0)
        for t, index, nbytes in arrivals:
            counts[index] = nbytes // 4
            offsets.setdefault(index, []).append(t - t0)
    starts = sorted(e["ts"] * 1e-6 for e in events if e["name"] == "request")
    period = statistics.median(b - a for a, b in zip(starts[1:], starts[2:]))
    order = sorted((statistics.median(v), i) for i, v in offsets.items())
    return counts, [(i, t) for t, i in order], statistics.median(spans) / period


def train_sim(cal: dict, rate: str, batch: int, pipelined: bool, tmp: Path) -> dict:
    """The model of a 2-node training run on the test bed: the traced gradients and their
    arrival, the compute per step of the run modelled (train_compute_s), on the node's one
    core."""
    counts, arrivals, backprop_share = trace_profile(TRACE)
    summary = json.loads(TRAININGS[(rate, batch)].read_text())["summary"]
    compute = train_compute_s(summary, "mlcomm-pipe" if pipelined else "mlcomm-sync")
    backward = backprop_share * compute
    span = arrivals[-1][1] or 1.0
    lines, before = [], 0.0
    for i, t in arrivals:
        lines.append(f"{i} {counts[i]} {(t - before) / span * backward}\n")
        before = t
    tfile = tmp / "trace_tensors.txt"
    tfile.write_text("".join(lines))
    net = cal["network"]
    scale = 0.5 if rate == "1gbit" else 1.0
    link = platforms.Network(net["link_bytes_per_s"] * scale, net["latency_s"])
    plat = write_platform(platforms.platform_xml("testbed", 2, link), tmp)
    args = [*node_args(cal["node"]), "--compute-on-core", "--threads", "1"]
    args += ["--forward", str(compute - backward), "--steps", "4"]
    args += ["--pipelined"] if pipelined else []
    return mlcsim(plat, 2, [*args, "train", str(tfile)])


def train_compute_s(summary: dict, mode: str) -> float:
    """A step's compute in a 2-node run of `mode`: `local`'s 2-node step (no
    communication) plus the CPU that TensorFlow's compute threads spent per step beyond
    `local`'s in that run. On the test bed's one core per node, backprop itself costs
    6-16 % more CPU beside ml_comm's threads and the kernel's TCP (their wake-ups preempt
    it and their copies evict its cache), which the model's node does not predict: it
    takes the compute as the run measured it, as it takes the gradients' arrival."""
    local = summary["local"]
    extra = summary[mode]["cpu_ms_per_step_2"]["tf_Compute"]
    extra -= local["cpu_ms_per_step_2"]["tf_Compute"]
    return (local["step_median_ms"]["median"] + extra) * 1e-3


def traced_progress() -> tuple[float, float]:
    """From the 2-node timeline: the share of batches started before the step's last
    gradient, and the median request time from its first gradient to done."""
    trace = json.loads(TRACE.read_text())
    team = trace["otherData"]["team 0"]
    durations = [e["dur"] * 1e-6 for e in trace["traceEvents"] if e["name"] == "request"]
    before = team["batches_started_before_last_arrival"] / team["segment_batches"]
    return before, statistics.median(durations[1:])


def share_at(cal: dict, weight: float, tmp: Path) -> float:
    cal["node"]["comm_weight"] = weight
    return train_sim(cal, "2gbit", 8, False, tmp)["batches_before_backprop_end"]


def fit_comm_weight(cal: dict) -> None:
    """The communication threads' share of the core against backprop's (SimGrid's
    priority weight): bisected so that the share of batches the model starts before the
    last gradient is the traced one (2 nodes, batch 8, 2 Gbit/s, synchronous). The range
    goes above 1 (an equal share): threads that ask for a short time slice run as soon
    as they wake, ahead of backprop."""
    target, _ = traced_progress()
    lo, hi = 0.001, 16.0
    with tempfile.TemporaryDirectory() as d:
        for _ in range(12):
            mid = math.sqrt(lo * hi)
            got = share_at(cal, mid, Path(d))
            lo, hi = (lo, mid) if got > target else (mid, hi)
        # The share moves in whole batches: keep the end whose share is nearer the trace's.
        cal["node"]["comm_weight"] = min(
            (lo, hi), key=lambda w: abs(share_at(cal, w, Path(d)) - target)
        )
    cal["node"]["from"] += (
        f"; comm_weight: fitted to {TRACE.relative_to(ROOT)} (batches started before the last "
        "gradient)"
    )


def validate_training(cal: dict, tmp: Path) -> list[str]:
    """The 2-node training runs: efficiency (+-5 points) and hidden fraction (+-10)."""
    missed = []
    print("\n| run | mode | efficiency measured | model | hidden measured | model |")
    print("|---|---|---:|---:|---:|---:|")
    for rate, batch in TRAININGS:
        summary = json.loads(TRAININGS[(rate, batch)].read_text())["summary"]
        for mode in ("mlcomm-sync", "mlcomm-pipe"):
            m = summary[mode]
            sim = train_sim(cal, rate, batch, mode == "mlcomm-pipe", tmp)
            step = statistics.median(s["step_s"] for s in sim["steps"][1:])
            eff = m["step_median_ms_1"]["median"] * 1e-3 / step
            real_eff, real_hidden = m["efficiency"]["median"], m["hidden_fraction"]
            hidden = sim["hidden_fraction"]
            print(
                f"| {rate} b{batch} | {mode} | {real_eff:.1%} | {eff:.1%} | "
                f"{real_hidden:.1%} | {hidden:.1%} |"
            )
            if abs(eff - real_eff) > 0.05:
                missed.append(
                    f"{rate} b{batch} {mode} efficiency {eff - real_eff:+.1%} (bar 5 points)"
                )
            if abs(hidden - real_hidden) > 0.10:
                missed.append(
                    f"{rate} b{batch} {mode} hidden {hidden - real_hidden:+.1%} (bar 10 points)"
                )
            if (rate, batch, mode) == ("2gbit", 8, "mlcomm-sync"):
                before, request = traced_progress()
                model_request = statistics.median(
                    s["comm_done_s"] - s["comm_start_s"] for s in sim["steps"][1:]
                )
                mirror = (
                    f"mirror against {TRACE.name}: batches started before the last gradient "
                    f"{before:.1%} measured, {sim['batches_before_backprop_end']:.1%} model; "
                    f"request from first gradient to done {request * 1e3:.1f} ms measured, "
                    f"{model_request * 1e3:.1f} ms model"
                )
    print(mirror)
    return missed


# ---- projection ----------------------------------------------------------------------


def resnet50_tensors() -> list[int]:
    """ResNet-50's 161 gradients (torchvision layout), in backprop order (last layer first)."""
    convs: list[tuple[int, int, int]] = [(3, 64, 7)]  # (in, out, kernel)
    inp = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            convs += [(inp, width, 1), (width, width, 3), (width, width * 4, 1)]
            if b == 0:
                convs.append((inp, width * 4, 1))  # the downsample branch
            inp = width * 4
    counts: list[int] = []
    for i, o, k in convs:
        counts += [i * o * k * k, o, o]  # conv weight, batch norm gamma and beta
    counts += [2048 * 1000, 1000]
    return counts[::-1]


MODELS = {
    # parameters' tensors, step seconds on one node (forward + backward), forward share
    "resnet50": (resnet50_tensors, 0.216, 1 / 3),
    "inception3": (lambda: [23_834_568 // 94] * 94, 0.45, 1 / 3),
}
PAPER = {"resnet50": {1024: 0.89}, "inception3": {512: 0.91}}


def tensors_file(
    counts: list[int], step_s: float, forward_share: float, tmp: Path
) -> tuple[Path, float]:
    """Backward time spread over the weight tensors equally (biases and norms take none)."""
    backward = step_s * (1 - forward_share)
    heavy = [c for c in counts if c > 4096] or counts
    per = backward / len(heavy)
    path = tmp / "tensors.txt"
    lines = (f"{i} {c} {per if c in heavy else 0.0}\n" for i, c in enumerate(counts))
    path.write_text("".join(lines))
    return path, step_s * forward_share


def jitter_args(
    jitter: str, cal: dict, tmp: Path, averaged: int = JITTER_STEPS
) -> tuple[list[str], int]:
    """The model's options for --jitter (a relative sd, or `measured`: the calibration's
    step times), and the steps to run: one more than averaged, the first being the warm-up
    (the ranks' arrival skew, the empty pipeline)."""
    if jitter == "measured":
        samples = tmp / "jitter.txt"
        samples.write_text("\n".join(map(str, cal["jitter"]["step_over_mean"])) + "\n")
        return ["--jitter-samples", str(samples)], 1 + averaged
    sd = float(jitter)
    return ["--jitter", str(sd)], 1 + (averaged if sd > 0 else 1)


def mean_step(sim: dict) -> float:
    """The mean time of the steps after the first: with jitter, each is the slowest node's."""
    steps = sim["steps"]
    return (steps[-1]["end_s"] - steps[0]["end_s"]) / (len(steps) - 1)


def step_times(sim: dict) -> list[float]:
    """Each step after the first, from the end of the one before."""
    ends = [s["end_s"] for s in sim["steps"]]
    return [b - a for a, b in zip(ends, ends[1:])]


def efficiency_se(step_s: float, times: list[float]) -> float | None:
    """The standard error of the efficiency step_s / mean(times), the steps taken as
    independent (None for fewer than 2)."""
    if len(times) < 2:
        return None
    mean = statistics.fmean(times)
    return step_s / mean * statistics.stdev(times) / math.sqrt(len(times)) / mean


def se_text(row: dict) -> str:
    se = row.get("efficiency_se")
    return f" ± {se:.1%}" if se else ""


def project(args: argparse.Namespace) -> int:
    cal = load_calibration()
    tensors, step_s, fwd_share = MODELS[args.model]
    counts = tensors() if not args.params else [args.params // args.tensors] * args.tensors
    step_s = args.step or step_s
    # The target's node: the NIC moves the bytes (no kernel TCP), communication has its own
    # cores (nothing to share them with but itself); reductions run at the measured speed.
    node = {
        **cal["node"],
        "send_overhead_s": args.overhead,
        "recv_overhead_s": args.overhead,
        "cpu_per_byte_s": 0.0,
        "comm_weight": 1.0,
    }
    results, allreduces = [], []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tfile, forward = tensors_file(counts, step_s, fwd_share, tmp)
        jitter, steps = jitter_args(args.jitter, cal, tmp, args.jitter_steps)
        total_bytes = 4 * sum(counts)
        for n in args.nodes:
            net = None
            if args.link_gbps:
                net = platforms.Network(args.link_gbps * 1e9 / 8, args.latency)
            plat = write_platform(
                platforms.platform_xml(args.platform, n, net, cores=args.cores), tmp
            )
            for alg in args.algorithms:
                extra = ["--bf16"] if args.bf16 else []
                extra += ["--pipelined"] if args.pipelined else []
                t0 = time.time()
                sim = mlcsim(
                    plat,
                    n,
                    [
                        *node_args(node),
                        "--threads",
                        str(args.threads),
                        "--algorithm",
                        alg,
                        "--agree",
                        args.agree,
                        "--sample",
                        str(args.sample),
                        *jitter,
                        "--forward",
                        str(forward),
                        "--steps",
                        str(steps),
                        *extra,
                        "train",
                        str(tfile),
                    ],
                )
                last = sim["steps"][-1]
                step = mean_step(sim)
                row = {
                    "nodes": n,
                    "algorithm": alg + (" pipelined" if args.pipelined else ""),
                    "step_s": step,
                    "exposed_s": step - step_s,
                    "communication_s": last["comm_done_s"] - last["comm_start_s"],
                    "efficiency": step_s / step,
                    "efficiency_se": efficiency_se(step_s, step_times(sim)),
                    "step_times_s": step_times(sim),
                    "agree_messages_per_rank_per_request": sim[
                        "agree_messages_per_rank_per_request"
                    ],
                    "wall_s": round(time.time() - t0, 1),
                }
                results.append(row)
                print(json.dumps(row), flush=True)
            if not args.mpi:
                continue
            # One MPI_Allreduce of every gradient after backprop: MPICH through SMPI, and
            # the same algorithm (Rabenseifner) in the model on one thread, where the
            # nodes' jitter reaches it. Beside it the whole gradient as one allreduce,
            # ml_comm's in float32 and with 16-bit values on the wire against MPICH's.
            t_mpi = smpi_allreduce(plat, n, [total_bytes], node, tmp)[total_bytes]
            baselines = []
            if jitter[0] == "--jitter" and float(jitter[1]) == 0:  # SMPI's nodes do not jitter
                baselines.append(("MPI_Allreduce after backprop (SMPI, MPICH)", t_mpi, None))
            one = {"nodes": n, "bytes": total_bytes, "mpich_smpi_s": t_mpi}
            for key, extra in (("ml_comm_s", []), ("ml_comm_bf16_s", ["--bf16"])):
                sweep = mlcsim(plat, n, [
                    *node_args(node), "--threads", str(args.threads), "--agree", args.agree,
                    "--sample", str(args.sample), *extra, "sweep", str(total_bytes),
                ])  # fmt: skip
                one[key] = sweep["rows"][0]["time_s"]
            one["mpich_over_ml_comm"] = t_mpi / one["ml_comm_s"]
            one["mpich_over_ml_comm_bf16"] = t_mpi / one["ml_comm_bf16_s"]
            allreduces.append(one)
            print(json.dumps(one), flush=True)
            sim = mlcsim(plat, n, [
                *node_args(node), "--threads", "1", "--algorithm", "rabenseifner",
                "--agree", "off", "--after-backprop", "--sample", str(args.sample),
                *jitter, "--forward", str(forward), "--steps", str(steps),
                "train", str(tfile),
            ])  # fmt: skip
            baselines.append(
                ("allreduce after backprop (model, Rabenseifner)", mean_step(sim) - step_s,
                 step_times(sim))
            )  # fmt: skip
            for name, t, times in baselines:
                row = {
                    "nodes": n,
                    "algorithm": name,
                    "step_s": step_s + t,
                    "exposed_s": t,
                    "efficiency": step_s / (step_s + t),
                }
                if times:
                    row["efficiency_se"] = efficiency_se(step_s, times)
                    row["step_times_s"] = times
                results.append(row)
                print(json.dumps(row), flush=True)
    print(
        f"\n{args.model} on {args.platform}: step {step_s} s on one node, "
        f"{total_bytes / 1e6:.1f} MB of gradients"
    )
    print(
        "| nodes | algorithm | step (ms) | exposed (ms) | efficiency "
        "| agreement msgs/rank/request |"
    )
    print("|---:|---|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['nodes']} | {r['algorithm']} | {r['step_s'] * 1e3:.1f} | "
            f"{r['exposed_s'] * 1e3:.1f} | "
            f"{r['efficiency']:.1%}{se_text(r)} | "
            f"{r.get('agree_messages_per_rank_per_request', '-')} |"
        )
    if allreduces:
        print(f"\nthe whole gradient as one allreduce ({total_bytes / 1e6:.1f} MB):")
        print("| nodes | MPICH (SMPI) ms | ml_comm ms | ratio | ml_comm 16-bit ms | ratio |")
        print("|---:|---:|---:|---:|---:|---:|")
        for a in allreduces:
            print(
                f"| {a['nodes']} | {a['mpich_smpi_s'] * 1e3:.1f} | {a['ml_comm_s'] * 1e3:.1f} | "
                f"{a['mpich_over_ml_comm']:.2f} | {a['ml_comm_bf16_s'] * 1e3:.1f} | "
                f"{a['mpich_over_ml_comm_bf16']:.2f} |"
            )
    out = {
        "model": args.model,
        "platform": args.platform,
        "step_s": step_s,
        "gradient_bytes": total_bytes,
        "jitter": args.jitter,
        "pipelined": args.pipelined,
        "paper": PAPER.get(args.model, {}),
        "rows": results,
        "allreduce": allreduces,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if args.png:
        plot(out, args.png)
    return 0


def check_sampling(args: argparse.Namespace) -> int:
    """The model's whole gradient in one allreduce, each thread's batches all run against
    the first --sample run and the rest at their mean: within 2 % at every node count."""
    cal = load_calibration()
    total = 4 * sum(MODELS[args.model][0]())
    node = {**cal["node"], "send_overhead_s": args.overhead, "recv_overhead_s": args.overhead}
    node.update(cpu_per_byte_s=0.0, comm_weight=1.0)
    worst = 0.0
    print(
        f"| nodes | full run (ms) | sampled, {args.sample} batch(es) a thread (ms) | error "
        + "| wall full / sampled (s) |"
    )
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for n in args.nodes:
            plat = write_platform(
                platforms.platform_xml(args.platform, n, cores=args.cores), Path(d)
            )
            times = []
            for k in (0, max(1, args.sample)):
                t0 = time.time()
                common = [*node_args(node), "--threads", str(args.threads), "--sample", str(k)]
                sim = mlcsim(plat, n, [*common, "sweep", str(total)])
                times.append((sim["rows"][0]["time_s"], time.time() - t0))
            err = times[1][0] / times[0][0] - 1
            worst = max(worst, abs(err))
            print(
                f"| {n} | {times[0][0] * 1e3:.2f} | {times[1][0] * 1e3:.2f} | {err:+.2%} | "
                f"{times[0][1]:.1f} / {times[1][1]:.1f} |"
            )
    return 1 if worst > 0.02 else 0


def plot(out: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for alg in sorted({r["algorithm"] for r in out["rows"]}):
        pts = [(r["nodes"], r["efficiency"]) for r in out["rows"] if r["algorithm"] == alg]
        ax.plot(*zip(*pts), marker="o", label=alg)
    for n, e in out["paper"].items():
        ax.plot([int(n)], [e], "k*", markersize=12, label=f"paper, {n} nodes")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes")
    ax.set_ylabel("efficiency")
    ax.set_title(f"{out['model']} on {out['platform']} (model)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tools/dev.py project",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--calibrate", action="store_true", help="write model/calibration.json")
    p.add_argument(
        "--measure-kernels",
        action="store_true",
        help=f"time the core's kernels here into {KERNELS.relative_to(ROOT)}",
    )
    p.add_argument("--validate", action="store_true", help="predict the 3-4 node sweeps")
    p.add_argument(
        "--small", action="store_true", help="with --validate: 3 sizes (the test command's)"
    )
    p.add_argument("--platform", default="aries", help="aries, fattree or testbed")
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--params", type=int, help="your model: parameter count (with --tensors)")
    p.add_argument("--tensors", type=int, default=100, help="your model: gradient tensors")
    p.add_argument("--step", type=float, help="one node's step time in seconds")
    p.add_argument("--nodes", default="2,16,128", help="node counts, comma-separated")
    p.add_argument(
        "--algorithms", default="auto", help="auto, ring, rd, rabenseifner (comma-separated)"
    )
    p.add_argument("--threads", type=int, default=2, help="communication threads per node")
    p.add_argument("--cores", type=int, default=2, help="cores left to communication per node")
    p.add_argument(
        "--overhead", type=float, default=0.5e-6, help="CPU seconds per message, each end"
    )
    p.add_argument("--link-gbps", type=float, help="a link's rate instead of the platform's")
    p.add_argument("--latency", type=float, default=1e-6, help="with --link-gbps: a link's latency")
    p.add_argument("--agree", default="tree", choices=["tree", "alltoall", "off"])
    p.add_argument(
        "--sample", type=int, default=0, help="batches run per lane before their mean is used"
    )
    p.add_argument(
        "--jitter",
        default="0",
        help="per-node step-time spread: a relative sd (normal draws), or `measured` "
        "(the test bed's step times, model/calibration.json)",
    )
    p.add_argument(
        "--jitter-steps",
        type=int,
        default=JITTER_STEPS,
        help="with --jitter: steps averaged after the warm-up one",
    )
    p.add_argument(
        "--pipelined", action="store_true", help="ml_comm's pipelined mode (one step late)"
    )
    p.add_argument("--bf16", action="store_true", help="16-bit values on the wire")
    p.add_argument(
        "--mpi",
        action="store_true",
        help="add MPI_Allreduce after backprop (MPICH through SMPI, and in the model), and "
        "the whole gradient as one allreduce against MPICH's",
    )
    p.add_argument("--check-sampling", action="store_true", help="sampled against full runs")
    p.add_argument("--json")
    p.add_argument("--png")
    args = p.parse_args(argv)
    build()
    if args.measure_kernels:
        KERNELS.write_text(json.dumps(measure_kernels(), indent=1) + "\n")
    if args.calibrate:
        write_calibration(calibrate())
        print(CALIBRATION.read_text())
        return 0
    if args.validate:
        return validate(args.small)
    args.nodes = [int(x) for x in args.nodes.split(",")]
    args.algorithms = args.algorithms.split(",")
    if args.check_sampling:
        return check_sampling(args)
    return project(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
