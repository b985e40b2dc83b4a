"""The scale model's node noise: each rank's factor on its compute in each step
(docs/scale.md, "Node terms"), written for mlcsim's --compute-factors.

A factor is run x node x (1 + detour):

- run: one draw per run, shared by every node (the machine's state during the job);
- node: one draw per rank, fixed for the run (one device slower than another);
- detour: per rank, drawn per block of steps (a block holds one draw, so that bursts
  last several steps) and partly shared by all ranks in that block (the same
  interruption everywhere).

`hpc` takes its figures from publications (docs/scale.md, "Node terms"); `trace` replays
the test bed's step times (benchmarks/results/step_times_local_b8: a shared virtual
machine) as a block bootstrap of their own sequences: blocks of consecutive steps, the two
nodes of one measured run side by side (their cross-correlation kept) and each run's mean
as a run factor; never as independent draws. Only the standard library is used.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE_FILES = sorted(
    (ROOT / "benchmarks" / "results" / "step_times_local_b8").glob("r*/rank*.json")
)


@dataclass(frozen=True)
class Noise:
    """Structured noise; every part can be switched off (its size 0)."""

    node_sd: float = 0.0  # relative sd of the fixed per-rank speed factor (normal)
    detour_mean: float = 0.0  # mean detour per rank and block, a fraction of compute (exponential)
    detour_block: int = 1  # steps one detour draw lasts
    detour_shared: float = 0.0  # fraction of a block's detour that is the same on every rank
    run_sd: float = 0.0  # relative sd of the run factor shared by all ranks (normal)
    trace: bool = False  # replay the test bed's step times instead (block bootstrap)
    trace_block: int = 10  # steps per bootstrap block
    # Spare nodes left out: node factors are drawn for ranks x (1 + spare) and the
    # slowest are dropped, as a job does that found its slow nodes and excluded them.
    spare: float = 0.0

    def without(self, part: str) -> Noise:
        """The same noise with one part off: node, detour, run (or all)."""
        if part == "node":
            return replace(self, node_sd=0.0)
        if part == "detour":
            return replace(self, detour_mean=0.0)
        if part == "run":
            return replace(self, run_sd=0.0)
        if part == "all":
            return Noise()
        raise ValueError(f"no noise part {part!r} (node, detour, run, all)")

    @property
    def off(self) -> bool:
        return not self.trace and not (self.node_sd or self.detour_mean or self.run_sd)


# Exponential detours: the mean of the largest of n draws is the mean times H(n).
def harmonic(n: int) -> float:
    return sum(1.0 / k for k in range(1, n + 1))


# The Cray plugin on Piz Daint (Mendygral et al., CUG 2018, §VI-A): ResNet-50 at 1,024
# P100 nodes sustained 111 samples/s/node against a peak of 115. Read as: a step's
# slowest node adds 115/111 - 1 = 3.6 % on average over the best steps, and the best
# steps are free of detours; with exponential detours that is 1,024 draws' mean maximum,
# H(1024) = 7.51 times the mean of one.
PLUGIN_SUSTAINED_OVER_PEAK = 115 / 111
DETOUR_MEAN_HPC = (PLUGIN_SUSTAINED_OVER_PEAK - 1) / harmonic(1024)
# GPUs of one model and SKU: "8% (max 22%) average performance variation" across a
# cluster's GPUs, "outliers up to 1.5X slower than the median GPU" (Sinha et al., "Not
# All GPUs Are Created Equal", SC22, arXiv:2208.11035, abstract; over 90 % of the GPUs of
# clusters of a few hundred to 27,648). Taken as the range of a cluster's GPUs without
# the outliers, whose share the abstract does not give: a normal's expected range over
# 300-27,000 draws is 6-8 sd, so sd = 8 % / 7 = 1.1 %.
NODE_SD_GPU = 0.08 / 7

PRESETS = {
    "none": Noise(),
    "hpc": Noise(node_sd=NODE_SD_GPU, detour_mean=DETOUR_MEAN_HPC),
    "trace": Noise(trace=True),
}


def factors(noise: Noise, ranks: int, steps: int, seed: int) -> list[list[float]]:
    """Each rank's compute factor in each step: ranks lists of steps numbers."""
    rng = random.Random(seed)
    if noise.trace:
        return trace_factors(ranks, steps, rng, noise.trace_block)
    run = max(0.5, rng.gauss(1.0, noise.run_sd)) if noise.run_sd else 1.0
    node = [max(0.5, rng.gauss(1.0, noise.node_sd)) if noise.node_sd else 1.0 for _ in range(ranks)]
    if noise.spare > 0 and noise.node_sd:
        extra = [
            max(0.5, rng.gauss(1.0, noise.node_sd)) for _ in range(math.ceil(ranks * noise.spare))
        ]
        node = sorted(node + extra)[:ranks]  # the fastest nodes stay
        rng.shuffle(node)
    out = [[run * node[r]] * steps for r in range(ranks)]
    if noise.detour_mean <= 0:
        return out
    rate = 1.0 / noise.detour_mean
    block = max(1, noise.detour_block)
    for b0 in range(0, steps, block):
        common = rng.expovariate(rate) * noise.detour_shared
        for r in range(ranks):
            detour = common + rng.expovariate(rate) * (1.0 - noise.detour_shared)
            for s in range(b0, min(steps, b0 + block)):
                out[r][s] *= 1.0 + detour
    return out


def trace_runs() -> list[tuple[list[float], ...]]:
    """The measured runs: per run, each rank's steps over that rank's mean."""
    runs: dict[str, list[list[float]]] = {}
    means: dict[str, list[float]] = {}
    for f in TRACE_FILES:
        steps = json.loads(f.read_text())["step_ms"]
        mean = statistics.fmean(steps)
        runs.setdefault(f.parent.name, []).append([t / mean for t in steps])
        means.setdefault(f.parent.name, []).append(mean)
    if not runs:
        raise FileNotFoundError(f"no step times under {TRACE_FILES and TRACE_FILES[0].parent}")
    return [tuple(v) for _, v in sorted(runs.items())]


def trace_run_factors() -> list[float]:
    """Each measured run's mean step over the mean of all runs (the run factor)."""
    per = {}
    for f in TRACE_FILES:
        per.setdefault(f.parent.name, []).append(
            statistics.fmean(json.loads(f.read_text())["step_ms"])
        )
    means = [statistics.fmean(v) for _, v in sorted(per.items())]
    grand = statistics.fmean(means)
    return [m / grand for m in means]


def trace_factors(ranks: int, steps: int, rng: random.Random, block: int) -> list[list[float]]:
    """Block bootstrap of the measured runs: ranks in pairs; each pair's steps are
    blocks of `block` consecutive measured steps of one run (rank 2j follows that run's
    first node, rank 2j+1 its second), each block from a run and start drawn at random;
    every rank times one run factor, drawn from the measured runs' means."""
    runs = trace_runs()
    run = rng.choice(trace_run_factors())
    out: list[list[float]] = [[] for _ in range(ranks)]
    for pair in range(0, ranks, 2):
        while len(out[pair]) < steps:
            measured = rng.choice(runs)
            length = min(len(seq) for seq in measured)
            start = rng.randrange(0, length - block + 1)
            take = min(block, steps - len(out[pair]))
            for k in range(2):
                if pair + k < ranks:
                    out[pair + k] += [run * x for x in measured[k][start : start + take]]
    return out


def write(rows: list[list[float]], path: Path) -> Path:
    path.write_text("".join(" ".join(f"{x:.6g}" for x in row) + "\n" for row in rows))
    return path


def reference_step_factor(noise: Noise, steps: int, seed: int) -> float:
    """One node alone (the efficiency's reference): its mean compute factor over the
    steps, from its own draws."""
    rows = factors(replace(noise, spare=0.0), 1, steps, seed)  # any node, not a chosen one
    return statistics.fmean(rows[0])
