"""Scaling efficiency on the test bed: benchmarks/train_scaling.py in every mode on 1 node
and on 2 nodes, interleaved and repeated; writes JSON and a bar chart.

    # as root, from the repository root (.venv built; Slurm and munge installed)
    .venv/bin/python benchmarks/train_scaling_driver.py --rate 2gbit --reps 3 \\
        --out benchmarks/results/train_scaling_2gbit

It brings the test bed up if it is not (tools/testbed.sh up, 2 nodes; it leaves it up),
shapes every veth to --rate (`off`: no shaping), then for each repetition runs every mode
at 1 node and at 2 nodes (`srun -N n --ntasks-per-node=1 --mpi=pmi2`), alternating the
order from one repetition to the next so that slow drifts of the machine hit every mode
alike. ml_comm modes run with ML_COMM_TIMELINE set (traces of the last repetition are kept
next to the JSON). Each run's veth byte counters are recorded: the bytes each node sent
per step show that the gradients crossed the emulated network.

Scaling efficiency of a mode at n nodes = its throughput at n nodes / (n x its throughput
at 1 node), paired within a repetition; the median over repetitions is reported with the
range. `vs_local` divides by n x the `local` run (no distribution code at all) instead.
Writes OUT.json (settings, every run, the summary) and OUT.png, and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

from ml_comm.mpi.launch import network_variables

ROOT = Path(__file__).resolve().parents[1]
TESTBED = ROOT / "tools" / "testbed.sh"
WORKER = ROOT / "benchmarks" / "train_scaling.py"
MODES = ("local", "mlcomm-sync", "mlcomm-pipe", "mlcomm-bf16", "naive", "mwms")
LABELS = {
    "local": "local (no comm)",
    "mlcomm-sync": "ml_comm sync",
    "mlcomm-pipe": "ml_comm pipelined",
    "mlcomm-bf16": "ml_comm sync, bf16 wire",
    "naive": "naive mpi4py Allreduce",
    "mwms": "TF MultiWorkerMirrored",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def testbed(*args: str, env: dict | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        [str(TESTBED), *args], env=env, capture_output=True, text=True, timeout=180
    )
    if check and proc.returncode != 0:
        raise SystemExit(f"tools/testbed.sh {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def ensure_testbed(nodes: int) -> None:
    """Use the test bed if it is up with enough nodes, else `up` (idempotent: it starts
    only what is missing). A bed up with too few nodes is left alone: say what to do."""
    base = Path(os.environ.get("TESTBED_DIR", "/tmp/ml_comm-testbed"))
    status = subprocess.run([str(TESTBED), "status"], capture_output=True, timeout=60)
    recorded = (base / "nodes").read_text().strip() if (base / "nodes").exists() else ""
    if status.returncode == 0 and recorded.isdigit() and int(recorded) >= nodes:
        log(f"test bed already up ({recorded} nodes, {base})")
        return
    if status.returncode == 0 and recorded.isdigit():
        raise SystemExit(
            f"the test bed at {base} is up with {recorded} nodes, {nodes} are needed: "
            f"run `tools/testbed.sh down` first (or set TESTBED_DIR and friends for another)"
        )
    log(f"bringing the test bed up with {nodes} nodes")
    print(testbed("up", env=dict(os.environ, NODES=str(nodes))), end="")


def job_environment() -> dict:
    """os.environ plus the test bed's exports (SLURM_CONF, UCX_TLS, UCX_NET_DEVICES)."""
    env = dict(os.environ)
    for line in testbed("env").splitlines():
        if line.startswith("export "):
            for item in shlex.split(line[len("export ") :]):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def veth_counters(nodes: int) -> list[tuple[int, int]]:
    """(bytes out of node i, bytes into node i) for i = 1..nodes (host side: rx = out)."""
    prefix = os.environ.get("TESTBED_PREFIX", "mlctb")
    out = []
    for i in range(1, nodes + 1):
        stats = Path("/sys/class/net") / f"{prefix}-v{i}" / "statistics"
        out.append((int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())))
    return out


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_cores(a: tuple[float, float], b: tuple[float, float]) -> float:
    total = b[1] - a[1]
    return round((b[0] - a[0]) / total * (os.cpu_count() or 1), 2) if total > 0 else 0.0


def wait_quiet(max_wait: float, idle_wanted: float) -> float:
    """Wait (up to max_wait s) until the machine's CPUs were idle >= idle_wanted over 2 s.
    Returns the last idle fraction measured."""
    deadline = time.monotonic() + max_wait
    while True:
        a = cpu_times()
        time.sleep(2.0)
        b = cpu_times()
        idle = 1.0 - (b[0] - a[0]) / max(b[1] - a[1], 1.0)
        if idle >= idle_wanted or time.monotonic() >= deadline:
            return round(idle, 3)


def run_one(mode: str, nodes: int, rep: int, index: int, args, env: dict, trace_dir: Path) -> dict:
    name = f"train_scaling-{uuid.uuid4().hex[:8]}"
    # Each rank writes its result here: srun cuts long stdout lines of concurrent tasks.
    result_dir = trace_dir / name
    worker = [
        "--mode",
        mode,
        "--batch",
        str(args.batch),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--width",
        str(args.width),
        "--cores-per-node",
        str(args.cores_per_node),
        "--intra",
        str(args.intra),
        "--inter",
        str(args.inter),
        "--threads",
        str(args.threads),
        # a fresh gRPC port per run: the last run's sockets may linger in TIME_WAIT
        "--port-base",
        str(20000 + 10 * index),
        "--result-dir",
        str(result_dir),
        *args.worker_args,
    ]
    cmd = [
        "srun",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        "--mpi=pmi2",
        f"--time={max(2, int(args.run_timeout // 60) + 1)}",
        f"--job-name={name}",
        "--kill-on-bad-exit=1",
        sys.executable,
        str(WORKER),
        *worker,
    ]
    run_env = dict(env)
    trace = None
    if mode.startswith("mlcomm"):
        trace = trace_dir / f"{mode}_n{nodes}_rep{rep}.rank{{rank}}.json"
        run_env["ML_COMM_TIMELINE"] = str(trace)
    idle_before = wait_quiet(args.quiet_wait, args.quiet_idle)
    cpu0 = cpu_times()
    before = veth_counters(nodes)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=args.run_timeout
        )
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        subprocess.run(["scancel", f"--name={name}"], env=env, timeout=30)
        rc = 124
        stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else ""
    wall = time.monotonic() - t0
    after = veth_counters(nodes)
    cpu1 = cpu_times()
    rows = []
    for path in sorted(result_dir.glob("rank*.json")):
        rows.append(json.loads(path.read_text()))
    shutil.rmtree(result_dir, ignore_errors=True)
    rows.sort(key=lambda r: r["rank"])
    run = {
        "mode": mode,
        "nodes": nodes,
        "rep": rep,
        "command": " ".join(shlex.quote(c) for c in cmd),
        "returncode": rc,
        "wall_s": wall,
        "ok": rc == 0 and len(rows) == nodes,
        "ranks": rows,
        "veth_bytes_out": [a[0] - b[0] for a, b in zip(after, before)],
        "veth_bytes_in": [a[1] - b[1] for a, b in zip(after, before)],
        "trace": str(trace) if trace else None,
        # the machine's idle CPU fraction just before the run, and its busy cores during it
        # (this run's ranks included: at most `nodes` of them are this run's)
        "idle_before": idle_before,
        "busy_cores_during": _busy_cores(cpu0, cpu1),
    }
    if not run["ok"]:
        run["stderr_tail"] = stderr[-3000:]
        run["stdout_tail"] = stdout[-1000:]
        return run
    slowest = max(r["elapsed_s"] for r in rows)
    steps_total = rows[0]["steps"] + rows[0]["warmup"]
    run["images_per_s"] = nodes * rows[0]["batch_per_rank"] * rows[0]["steps"] / slowest
    run["step_median_ms"] = max(r["step_median_ms"] for r in rows)
    run["veth_mb_out_per_step"] = [b / steps_total / 1e6 for b in run["veth_bytes_out"]]
    run["pmi2_errors"] = stderr.count("invalid client request")
    overlaps = [r["overlap"] for r in rows if r.get("overlap")]
    if overlaps:
        comm = sum(o["communication_s"] for o in overlaps)
        hidden = sum(o["hidden_s"] for o in overlaps)
        run["overlap"] = {
            "communication_s": comm,
            "hidden_s": hidden,
            "hidden_fraction": hidden / comm if comm else 0.0,
            "tail_after_backprop_ms": max(o["tail_after_backprop_ms"] for o in overlaps),
            "overlap_ml_comm": statistics.mean(r.get("overlap_ml_comm", 0.0) for r in rows),
        }
    return run


def summarize(runs: list[dict], modes, nodes: int, rate_bps: float | None) -> dict:
    """Per mode: throughput medians, paired per-repetition efficiencies, overlap."""
    ok = [r for r in runs if r["ok"]]

    def tput(mode, n):
        return {r["rep"]: r["images_per_s"] for r in ok if r["mode"] == mode and r["nodes"] == n}

    local, local_many = tput("local", 1), tput("local", nodes)
    # n independent trainings at once against one alone: what sharing the machine costs,
    # with no communication at all (the most any mode can reach here).
    ceiling = {k: local_many[k] / (nodes * local[k]) for k in local_many if k in local}
    out = {}
    for mode in modes:
        one, many = tput(mode, 1), tput(mode, nodes)
        entry = {
            "images_per_s_1": _stats(list(one.values())),
            f"images_per_s_{nodes}": _stats(list(many.values())),
        }
        pairs = {k: many[k] / (nodes * one[k]) for k in many if k in one}
        entry["efficiency"] = _stats(list(pairs.values()))
        if mode != "local":
            vs_local = [many[k] / (nodes * local[k]) for k in many if k in local]
            entry["efficiency_vs_local"] = _stats(vs_local)
            of_ceiling = [pairs[k] / ceiling[k] for k in pairs if k in ceiling]
            entry["efficiency_of_ceiling"] = _stats(of_ceiling)
        rows = [r for r in ok if r["mode"] == mode and r["nodes"] == nodes]
        if rows and rows[0]["ranks"][0].get("pipelined") is not None:
            entry["pipelined"] = all(x["pipelined"] for r in rows for x in r["ranks"])
        overlaps = [r["overlap"] for r in rows if r.get("overlap")]
        if overlaps:
            comm = sum(o["communication_s"] for o in overlaps)
            hidden = sum(o["hidden_s"] for o in overlaps)
            entry["hidden_fraction"] = hidden / comm if comm else 0.0
            entry["tail_after_backprop_ms"] = _stats(
                [o["tail_after_backprop_ms"] for o in overlaps]
            )
            entry["overlap_ml_comm"] = statistics.mean(o["overlap_ml_comm"] for o in overlaps)
        if rows:
            entry["veth_mb_out_per_step"] = statistics.median(
                x for r in rows for x in r["veth_mb_out_per_step"]
            )
            entry["step_median_ms"] = _stats([r["step_median_ms"] for r in rows])
        for n in (1, nodes):
            cpu = _mean_dicts(
                x.get("cpu_ms_per_step", {})
                for r in ok
                if r["mode"] == mode and r["nodes"] == n
                for x in r["ranks"]
            )
            if cpu:
                entry[f"cpu_ms_per_step_{n}"] = cpu
        ones = [r for r in ok if r["mode"] == mode and r["nodes"] == 1]
        if ones:
            entry["step_median_ms_1"] = _stats([r["step_median_ms"] for r in ones])
        out[mode] = entry
    # The wire time of a step (bytes each node sent per step / link rate) against the extra
    # time a step takes on n nodes: how much of the communication the step did not pay for,
    # whatever hid it (overlap with backprop, pipelining), CPU contention included.
    for entry in out.values():
        many, one = entry.get("step_median_ms", {}), entry.get("step_median_ms_1", {})
        if rate_bps and many and one and entry.get("veth_mb_out_per_step", 0) > 0.1:
            wire_ms = 1e3 * entry["veth_mb_out_per_step"] * 1e6 / rate_bps
            exposed_ms = many["median"] - one["median"]
            entry["wire_ms_per_step"] = wire_ms
            entry["exposed_ms_per_step"] = exposed_ms
            entry["effective_hidden_fraction"] = 1.0 - exposed_ms / wire_ms
    ref = out.get("mlcomm-sync", {}).get(f"images_per_s_{nodes}", {}).get("median")
    for mode in ("mwms", "naive"):
        other = out.get(mode, {}).get(f"images_per_s_{nodes}", {}).get("median")
        if ref and other:
            out[mode]["mlcomm_sync_speedup"] = ref / other
    return out


def rate_bytes(rate: str) -> float | None:
    """tc rate ('2gbit', '500mbit', '1gbps') -> bytes/s; None for 'off'."""
    text = rate.strip().lower()
    if text == "off":
        return None
    units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "bit": 1 / 8}
    units.update({"kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "bps": 1.0})
    for unit, scale in units.items():
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text) / 8


def _mean_dicts(dicts) -> dict:
    """Key-wise mean of dicts of numbers (a key missing from a dict counts as 0)."""
    dicts = list(dicts)
    keys = sorted({k for d in dicts for k in d})
    return {k: round(sum(d.get(k, 0.0) for d in dicts) / len(dicts), 1) for k in keys}


def _stats(values: list[float]) -> dict:
    if not values:
        return {}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def write_plot(summary: dict, nodes: int, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in summary if summary[m].get("efficiency")]
    fig, (ax_eff, ax_tp) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.38
    for k, (key, label, color) in enumerate(
        (
            ("efficiency", "vs the mode's own 1-node run", "tab:blue"),
            ("efficiency_of_ceiling", "as a share of local's (the machine's ceiling)", "tab:gray"),
        )
    ):
        have = [i for i, m in enumerate(modes) if summary[m].get(key)]
        stats = [summary[modes[i]][key] for i in have]
        med = [100 * e["median"] for e in stats]
        lo = [100 * (e["median"] - e["min"]) for e in stats]
        hi = [100 * (e["max"] - e["median"]) for e in stats]
        xs = [i + (k - 0.5) * width for i in have]
        bars = ax_eff.bar(xs, med, width, yerr=[lo, hi], capsize=3, color=color, label=label)
        ax_eff.bar_label(bars, fmt="%.0f%%", fontsize=8, padding=2)
    ax_eff.axhline(90, color="tab:red", ls="--", lw=1, label="90 % target")
    ax_eff.set_xticks(range(len(modes)))
    names = []
    for m in modes:
        name = textwrap.fill(LABELS.get(m, m), 14)
        if summary[m].get("pipelined") is False and m == "mlcomm-pipe":
            name += "\n(ran synchronously)"
        if m == "local":
            name += "\nn at once:\nthe ceiling"
        if "hidden_fraction" in summary[m]:
            name += f"\n{100 * summary[m]['hidden_fraction']:.0f}% comm hidden"
        names.append(name)
    ax_eff.set_xticklabels(names, fontsize=7)
    ax_eff.set_ylabel(f"scaling efficiency at {nodes} nodes (%)")
    keys = ("efficiency", "efficiency_of_ceiling")
    tops = [100 * summary[m][k]["max"] for m in modes for k in keys if summary[m].get(k)]
    ax_eff.set_ylim(0, max([115.0, *(1.1 * t for t in tops)]))
    ax_eff.legend(fontsize=8, loc="lower left")
    ax_eff.grid(True, axis="y", alpha=0.3)

    all_modes = [m for m in summary if summary[m].get("images_per_s_1")]
    xs = range(len(all_modes))
    one = [summary[m]["images_per_s_1"]["median"] for m in all_modes]
    many = [summary[m].get(f"images_per_s_{nodes}", {}).get("median", 0.0) for m in all_modes]
    ax_tp.bar([x - 0.2 for x in xs], one, 0.4, label="1 node", color="tab:olive")
    ax_tp.bar([x + 0.2 for x in xs], many, 0.4, label=f"{nodes} nodes", color="tab:green")
    ax_tp.set_xticks(list(xs))
    ax_tp.set_xticklabels([LABELS.get(m, m) for m in all_modes], fontsize=7, rotation=20)
    ax_tp.set_ylabel("images/s (all nodes)")
    ax_tp.legend(fontsize=8)
    ax_tp.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def print_table(summary: dict, nodes: int) -> None:
    print(
        f"{'mode':14s} {'img/s 1':>8s} {f'img/s {nodes}':>8s} {'eff':>6s} {'range':>13s} "
        f"{'vs local':>8s} {'hidden':>7s} {'tail ms':>8s} {'MB/step':>8s} {'eff.hidden':>10s} "
        f"{'of ceiling':>10s}"
    )
    for mode, e in summary.items():
        one = e.get("images_per_s_1", {}).get("median", float("nan"))
        many = e.get(f"images_per_s_{nodes}", {}).get("median", float("nan"))
        eff = e.get("efficiency", {})
        cells = [
            f"{100 * eff['median']:.1f}%" if eff else "",
            f"{100 * eff['min']:.0f}-{100 * eff['max']:.0f} %" if eff else "",
        ]
        vs_local = e.get("efficiency_vs_local", {}).get("median")
        cells.append(f"{100 * vs_local:.1f}%" if vs_local else "")
        hidden = e.get("hidden_fraction")
        cells.append(f"{100 * hidden:.0f}%" if hidden is not None else "")
        tail = e.get("tail_after_backprop_ms", {}).get("median")
        cells.append(f"{tail:.0f}" if tail is not None else "")
        eh = e.get("effective_hidden_fraction")
        cells.append(f"{100 * eh:.0f}%" if eh is not None else "")
        ceiling = e.get("efficiency_of_ceiling", {}).get("median")
        cells.append(f"{100 * ceiling:.1f}%" if ceiling else "")
        print(
            f"{mode:14s} {one:8.2f} {many:8.2f} {cells[0]:>6s} {cells[1]:>13s} {cells[2]:>8s} "
            f"{cells[3]:>7s} {cells[4]:>8s} {e.get('veth_mb_out_per_step', float('nan')):8.1f} "
            f"{cells[5]:>10s} {cells[6]:>10s}"
        )


def print_notes(summary: dict, nodes: int) -> None:
    for mode in ("mwms", "naive"):
        ratio = summary.get(mode, {}).get("mlcomm_sync_speedup")
        if ratio:
            print(f"ml_comm sync / {mode} throughput at {nodes} nodes: {ratio:.2f}x")
    for mode, e in summary.items():
        one, many = e.get("cpu_ms_per_step_1"), e.get(f"cpu_ms_per_step_{nodes}")
        if one and many:
            cells = ", ".join(f"{k} {one.get(k, 0):.0f}->{v:.0f}" for k, v in many.items())
            print(f"CPU ms/step per rank, {mode}, 1->{nodes} nodes: {cells}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", default="2gbit", help="tc tbf rate on every veth, or 'off'")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="images per rank per step")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--cores-per-node", type=int, default=1)
    ap.add_argument("--intra", type=int, default=0, help="0: --cores-per-node")
    ap.add_argument("--inter", type=int, default=1)
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        help="before each run wait up to this many seconds for the machine to be idle "
        "(--quiet-idle of its CPU time over 2 s); for machines shared with other work",
    )
    ap.add_argument("--quiet-idle", type=float, default=0.9)
    ap.add_argument("--retries", type=int, default=1, help="runs again a run that failed")
    ap.add_argument("--threads", type=int, default=1, help="ml_comm threads per team")
    ap.add_argument("--run-timeout", type=float, default=240.0, help="seconds per srun")
    ap.add_argument("--out", default="benchmarks/results/train_scaling_2gbit", help="OUT.json/.png")
    ap.add_argument(
        "--combine",
        nargs="+",
        metavar="JSON",
        help="run nothing: summarize the runs of these earlier OUT.json files into --out (a "
        "mode's runs in a later file replace an earlier file's, e.g. a separate --modes local)",
    )
    ap.add_argument("worker_args", nargs="*", help="after --: more train_scaling.py arguments")
    args = ap.parse_args(argv)
    if args.combine:
        return combine([Path(f) for f in args.combine], Path(args.out))
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown modes {bad}; choose from {', '.join(MODES)}")
    if os.geteuid() != 0:
        print("train_scaling_driver.py: needs root (the test bed)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    trace_dir = out.with_name(out.name + "_traces")
    trace_dir.mkdir(exist_ok=True)

    if args.cores_per_node > 0 and args.nodes * args.cores_per_node > (os.cpu_count() or 1):
        log(
            f"warning: {args.nodes} nodes x {args.cores_per_node} cores > {os.cpu_count()} "
            "cores: the nodes will share cores, and the 2-node runs are not comparable"
        )
    ensure_testbed(args.nodes)
    print(testbed("shape", args.rate), end="")
    env = job_environment()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    header = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "rate": args.rate,
        "nodes": args.nodes,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        # what chose and tuned the MPI's network (UCX_TLS, UCX_TCP_*, ...): figures differ by it
        "network_env": network_variables(env),
        "loadavg_before": os.getloadavg(),
    }
    runs: list[dict] = []
    t_start = time.monotonic()
    index = 0
    for rep in range(args.reps):
        order = modes if rep % 2 == 0 else modes[::-1]
        for mode in order:
            counts = (1, args.nodes)
            if rep % 2:
                counts = counts[::-1]
            for n in counts:
                for attempt in range(args.retries + 1):
                    index += 1
                    run = run_one(mode, n, rep, index, args, env, trace_dir)
                    run["attempt"] = attempt
                    runs.append(run)
                    if run["ok"]:
                        break
                    log(f"rep {rep} {mode} {n} node(s): FAILED (exit {run['returncode']})")
                    print(run.get("stderr_tail", "")[-1500:], file=sys.stderr)
                if run["ok"]:
                    extra = ""
                    if run.get("overlap"):
                        extra = f", {100 * run['overlap']['hidden_fraction']:.0f}% comm hidden"
                    log(
                        f"rep {rep} {mode:12s} {n} node(s): {run['images_per_s']:7.2f} img/s, "
                        f"step {run['step_median_ms']:.0f} ms, "
                        f"{max(run['veth_mb_out_per_step']):.1f} MB/step/node out{extra} "
                        f"({run['wall_s']:.0f} s)"
                    )
                _dump(out, header, runs, None)
    header["loadavg_after"] = os.getloadavg()
    header["total_s"] = time.monotonic() - t_start
    summary = summarize(runs, modes, args.nodes, rate_bytes(args.rate))
    _dump(out, header, runs, summary)
    # Keep the multi-node traces of the last repetition only (a few hundred kB each).
    for trace in trace_dir.glob("*.json"):
        if not trace.name.split(".rank")[0].endswith(f"_n{args.nodes}_rep{args.reps - 1}"):
            trace.unlink()
    first = next((r for r in runs if r["ok"]), None)
    title = "train_scaling"
    if first:
        title = (
            f"ResNet-10 (w{args.width}, {first['ranks'][0]['parameters'] / 1e6:.1f} M params) on "
            f"synthetic 32x32, batch {args.batch}/node, {args.cores_per_node} core/node; test "
            f"bed {args.nodes} nodes, link {args.rate}; {args.reps} reps x {args.steps} steps; "
            f"{header['date']}"
        )
    if any(e.get("efficiency") for e in summary.values()):
        write_plot(summary, args.nodes, out.with_suffix(".png"), title)
    print_table(summary, args.nodes)
    print_notes(summary, args.nodes)
    log(f"wrote {out.with_suffix('.json')} and .png in {header['total_s']:.0f} s")
    failed = {(r["mode"], r["nodes"], r["rep"]) for r in runs if not r["ok"]}
    failed -= {(r["mode"], r["nodes"], r["rep"]) for r in runs if r["ok"]}
    return 1 if failed else 0


def combine(files: list[Path], out: Path) -> int:
    """One summary, table and plot from the runs of several driver outputs of one setting."""
    loaded = [json.loads(f.read_text()) for f in files]
    by_mode: dict[str, list[dict]] = {}
    for data in loaded:
        for mode in {r["mode"] for r in data["runs"]}:
            by_mode[mode] = [r for r in data["runs"] if r["mode"] == mode]
    runs = [r for mode in MODES for r in by_mode.get(mode, [])]
    first = loaded[0]["header"]
    nodes, rate = first["nodes"], first["rate"]
    if any((d["header"]["nodes"], d["header"]["rate"]) != (nodes, rate) for d in loaded):
        raise SystemExit("--combine: the files were run with different --nodes or --rate")
    modes = [m for m in MODES if m in by_mode]
    summary = summarize(runs, modes, nodes, rate_bytes(rate))
    header = {"combined_from": {str(f): d["header"] for f, d in zip(files, loaded)}}
    _dump(out, header, runs, summary)
    settings = first["settings"]
    title = (
        f"ResNet-10 (w{settings['width']}), batch {settings['batch']}/node, "
        f"{settings['cores_per_node']} core/node; test bed {nodes} nodes, link {rate}; "
        f"combined from {len(files)} runs of the driver, {first['date'][:10]}"
    )
    write_plot(summary, nodes, out.with_suffix(".png"), title)
    print_table(summary, nodes)
    print_notes(summary, nodes)
    return 0


def _dump(out: Path, header: dict, runs: list[dict], summary: dict | None) -> None:
    data = {"header": header, "summary": summary, "runs": runs}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str) + "\n")


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
