"""One configuration of the scale model run over replicates: each replicate draws its
own noise (project_noise) with its own seed, and every figure is the median over the
replicates with its 5-95 % band (docs/scale.md, "Commands": --replicates).

A replicate's efficiency is one node alone (its own draws: compute only, no
communication, no copies) over the n-node run's mean step after a warm-up step, as the
published figures compare an n-node run with a 1-node one.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import project_noise as noise_mod
import project_platforms as platforms
import project_profile as profiles
from project_sim import mlcsim, node_args, write_platform

# Steps after the warm-up one that each replicate averages.
MEASURED_STEPS = 3
# The ring's time is a fixed part (its start and end) and a cost per step: every step of
# a ring is alike (each rank sends one block to the next; a ring of k servers has the same
# share of hops between servers as one of 128). Both are measured at these block sizes on
# rings of two lengths of the case's servers (the difference of the two is the steps'),
# checked on a third, and scaled to the case's ranks. The core's ring sends a step as two
# messages once a call holds 64 KiB or more, as every fused buffer at hundreds of ranks
# does: the blocks start where the fitting rings are in that regime too; a smaller fused
# buffer costs what the first row does (the steps' latency, which is most of it there).
HOROVOD_FIT_SERVERS = (8, 16)
HOROVOD_CHECK_SERVERS = 32
HOROVOD_BLOCKS = tuple(1 << k for k in range(13, 21))  # 8 KiB - 1 MiB
HOROVOD_CHECK_BLOCKS = (16 << 10, 128 << 10)
HOROVOD_FIT_TOLERANCE = 0.02


@dataclass(frozen=True)
class Case:
    """Everything one run of the model needs besides the calibration."""

    platform: str
    nodes: int  # hosts
    model: str
    step_s: float
    ranks_per_node: int = 1
    placement: str = "contiguous"  # or "random" (a fresh permutation per replicate)
    profile: str = "measured"
    # ml_comm, list_after_backprop (its team on the whole list after backprop),
    # after_backprop (one MPI-style allreduce), horovod
    scheme: str = "ml_comm"
    threads: int = 2
    cores: int = 2
    overhead_s: float = 0.5e-6
    pcie_bps: float = 0.0
    noise: noise_mod.Noise = field(default_factory=noise_mod.Noise)
    interference: float = 0.0  # compute's slowdown beside communication (shared cores)
    pipelined: bool = False
    algorithm: str = "auto"
    agree: str = "tree"
    sample: int = 1
    bf16: bool = False
    fusion_bytes: float = 64 * 2**20
    cycle_s: float = 5e-3
    network: platforms.Network | None = None
    reduce_bps: float = 0.0  # sums' speed where not the host CPU's (0: the calibration's)

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def deterministic(self) -> bool:
        return self.noise.off and self.placement == "contiguous"


@dataclass
class Result:
    efficiencies: list[float]
    step_s: list[float]
    agree_messages_per_rank_per_request: float | None
    wall_s: float

    @property
    def median(self) -> float:
        return statistics.median(self.efficiencies)

    @property
    def band(self) -> tuple[float, float]:
        return band(self.efficiencies)


def continued(efficiencies: list[float], step_s: list[float], wall_s: float, new: Result) -> Result:
    """An earlier run's replicates followed by `new`'s, which continue it (run's `first`)."""
    return Result(
        efficiencies + new.efficiencies,
        step_s + new.step_s,
        new.agree_messages_per_rank_per_request,
        round(wall_s + new.wall_s, 1),
    )


def band(values: list[float]) -> tuple[float, float]:
    """5 % and 95 % points (linear between order statistics; one value: itself)."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0], xs[0]

    def at(q: float) -> float:
        pos = q * (len(xs) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return at(0.05), at(0.95)


def node(case: Case, cal: dict) -> dict:
    """The target's node: the NIC moves the bytes (no kernel TCP), communication has
    cores of its own; reductions at the measured speed of this machine's CPU, or where
    the case reduces on a GPU, at that speed."""
    speeds = {}
    if case.reduce_bps:
        speeds = {k: case.reduce_bps for k in ("reduce_bytes_per_s", "convert_bytes_per_s")}
    return {
        **cal["node"],
        **speeds,
        "send_overhead_s": case.overhead_s,
        "recv_overhead_s": case.overhead_s,
        "cpu_per_byte_s": 0.0,
        "comm_weight": 1.0,
    }


def platform_file(case: Case, tmp: Path) -> Path:
    xml = platforms.platform_xml(case.platform, case.nodes, case.network, cores=case.cores)
    return write_platform(xml, tmp, f"platform_{case.platform}_{case.nodes}.xml")


def horovod_table(case: Case, cal: dict, tmp: Path) -> list[tuple[float, float]]:
    """The allreduce of B fused bytes over the case's ranks: NCCL 2's ring (the core's
    ring file, every rank in one ring, one segment per call, one thread, no agreement),
    2 (n - 1) steps of a block of B / n bytes. The model runs such rings on a few of the
    case's servers (a ring of 512 ranks would cost the simulator hours): at each block
    size on two lengths, for the fixed part and the cost of a step, checked on a ring of
    32 servers; returns (bytes, seconds) for the case's n ranks."""
    args = [*node_args(node(case, cal)), "--threads", "1", "--algorithm", "ring"]
    args += ["--agree", "off", "--ranks-per-node", str(case.ranks_per_node), "--iters", "1"]

    def ring(servers: int, block: int) -> tuple[int, float]:
        small = replace(case, nodes=servers)
        nbytes = block * small.ranks
        plat = platform_file(small, tmp)
        sweep = [
            *platforms.simgrid_cfg(case.platform),
            "--chunk",
            str(nbytes),
            "sweep",
            str(nbytes),
        ]
        sim = mlcsim(plat, small.ranks, [*args, *sweep])
        return 2 * (small.ranks - 1), sim["rows"][0]["time_s"]

    k1, k2 = HOROVOD_FIT_SERVERS
    fit = {}
    for block in HOROVOD_BLOCKS:
        (s1, t1), (s2, t2) = ring(k1, block), ring(k2, block)
        per_step = (t2 - t1) / (s2 - s1)
        fit[block] = (t1 - s1 * per_step, per_step)
    for block in HOROVOD_CHECK_BLOCKS:
        steps, got = ring(HOROVOD_CHECK_SERVERS, block)
        fixed, per_step = fit[block]
        if abs((fixed + steps * per_step) / got - 1) > HOROVOD_FIT_TOLERANCE:
            raise RuntimeError(
                f"a ring of {HOROVOD_CHECK_SERVERS} servers with {block} B blocks takes "
                f"{got * 1e3:.3f} ms, {(fixed + steps * per_step) * 1e3:.3f} ms by the fixed "
                f"part and the cost per step fitted on {k1} and {k2}"
            )
    n = case.ranks
    return [(b * n, fixed + 2 * (n - 1) * per_step) for b, (fixed, per_step) in sorted(fit.items())]


def negotiation_s(case: Case) -> float:
    """Horovod's coordination per cycle: every rank's ready list to rank 0 and the
    answer back, each a tree of log2 n messages at the case's per-message cost."""
    return 2 * math.ceil(math.log2(max(2, case.ranks))) * 2 * case.overhead_s


def scheme_args(case: Case, cal: dict, tmp: Path, cache: dict) -> list[str]:
    if case.scheme == "horovod":
        key = (case.platform, case.ranks, case.ranks_per_node, case.overhead_s, case.reduce_bps)
        if key not in cache:
            cache[key] = horovod_table(case, cal, tmp)
        table = tmp / "allreduce.txt"
        table.write_text("".join(f"{b:.0f} {t:.9g}\n" for b, t in cache[key]))
        return [
            "--horovod", "--fusion-threshold", str(case.fusion_bytes), "--cycle", str(case.cycle_s),
            "--negotiation", str(negotiation_s(case)), "--allreduce-table", str(table),
        ]  # fmt: skip
    args = ["--threads", str(case.threads), "--algorithm", case.algorithm, "--agree", case.agree]
    if case.scheme == "list_after_backprop":
        args.append("--list-after-backprop")
    if case.scheme == "after_backprop":
        args = ["--threads", "1", "--algorithm", "rabenseifner", "--agree", "off"]
        args.append("--after-backprop")
    if case.bf16:
        args.append("--bf16")
    if case.pipelined:
        args.append("--pipelined")
    if case.pcie_bps:
        args += ["--pcie-bps", str(case.pcie_bps)]
    return args


def run(
    case: Case,
    cal: dict,
    replicates: int,
    tmp: Path,
    seed: int = 1,
    cache=None,
    workers: int = 1,
    first: int = 0,
) -> Result:
    """The case over `replicates` replicates (one when nothing in it is random), `workers`
    simulations at a time. Replicate k draws with seed `seed + k` whatever else runs, so
    `first` > 0 runs only replicates `first`..`replicates - 1`: the rest of a shorter run."""
    cache = {} if cache is None else cache
    t0 = time.time()
    sched = profiles.schedule(case.model, case.profile, case.step_s)
    tfile = sched.write(tmp / "tensors.txt")
    plat = platform_file(case, tmp)
    steps = 1 + MEASURED_STEPS
    common = [*platforms.simgrid_cfg(case.platform), *node_args(node(case, cal))]
    common += ["--sample", str(case.sample)]
    common += ["--ranks-per-node", str(case.ranks_per_node)]
    common += [*scheme_args(case, cal, tmp, cache), "--forward", str(sched.forward_s)]
    common += ["--steps", str(steps)]

    def replicate(rep: int) -> tuple[float, float, float | None]:
        rows = noise_mod.factors(case.noise, case.ranks, steps, seed + rep)
        if case.interference and case.ranks > 1:
            rows = [[x * (1 + case.interference) for x in row] for row in rows]
        factors = noise_mod.write(rows, tmp / f"factors_{rep}.txt")
        args = [*common, "--compute-factors", str(factors)]
        if case.placement == "random":
            hosts = [r // case.ranks_per_node for r in range(case.ranks)]
            random.Random(10_000_019 * (seed + rep)).shuffle(hosts)
            (tmp / f"placement_{rep}.txt").write_text("".join(f"{h}\n" for h in hosts))
            args += ["--placement", str(tmp / f"placement_{rep}.txt")]
        sim = mlcsim(plat, case.ranks, [*args, "train", str(tfile)])
        ends = [s["end_s"] for s in sim["steps"]]
        mean_step = (ends[-1] - ends[0]) / (len(ends) - 1)
        alone = alone_step_s(case, rep, seed)
        return alone / mean_step, mean_step, sim.get("agree_messages_per_rank_per_request")

    count = 1 if case.deterministic else replicates
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        done = list(pool.map(replicate, range(first, count)))
    return Result(
        [d[0] for d in done], [d[1] for d in done], done[-1][2], round(time.time() - t0, 1)
    )


def alone_step_s(case: Case, rep: int, seed: int = 1) -> float:
    """Replicate rep's step on one node with its noise: what its efficiency divides."""
    return case.step_s * noise_mod.reference_step_factor(
        case.noise, MEASURED_STEPS, 7_000_003 + seed + rep
    )


def without(case: Case, term: str) -> Case:
    """The case with one node term off (TERMS), or all of them."""
    if term == "all":
        for t in TERMS:
            case = without(case, t)
        return case
    if term == "profile":
        return replace(case, profile="equal")
    if term == "copies":
        return replace(case, pcie_bps=0.0)
    if term == "node_speed":
        return replace(case, noise=case.noise.without("node"))
    if term == "detours":
        return replace(case, noise=case.noise.without("detour"))
    if term == "run_factor":
        return replace(case, noise=case.noise.without("run"))
    if term == "interference":
        return replace(case, interference=0.0)
    if term == "shared_nic":  # every rank a host (and NIC) of its own
        return replace(case, nodes=case.ranks, ranks_per_node=1)
    raise ValueError(f"no node term {term!r} ({', '.join(TERMS)}, all)")


TERMS = ("profile", "copies", "node_speed", "detours", "run_factor", "interference", "shared_nic")
