"""The scale model's gradients and when backprop produces them (docs/scale.md, "Node
terms": the backward profile).

The tensors are keras.applications' (weights=None), as benchmarks/layer_profile.py
recorded them in benchmarks/results/layer_profile_<model>.json with, per tensor, the
median time from the loss to its gradient on this machine's CPU (100 steps) and its
backward FLOPs. A target's step is split as the CPU's is (forward and update, then
backward) and its backward time spread over the tensors by one of:

  measured   each tensor's share of the CPU's backward window, in the order measured
  flops      each tensor's share of the backward FLOPs, in reverse layer order
  equal      the same time for every tensor of more than 4,096 elements, a third of the
             step forward (the model before these terms: no profile was measured then)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PROFILES = ("measured", "flops", "equal")
EQUAL_FORWARD_SHARE = 1 / 3
EQUAL_MIN_ELEMENTS = 4096


def profile_path(model: str) -> Path:
    return RESULTS / f"layer_profile_{model}.json"


def load(model: str) -> dict:
    path = profile_path(model)
    if not path.exists():
        raise FileNotFoundError(
            f"{path.relative_to(ROOT)}: run benchmarks/layer_profile.py --model {model} "
            f"--json {path.relative_to(ROOT)}"
        )
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Schedule:
    """What mlcsim's train mode reads: (layout index, elements, seconds of backprop
    before it) per tensor in arrival order, and the step's other compute."""

    lines: list[tuple[int, int, float]]
    forward_s: float
    profile: str

    @property
    def counts(self) -> list[int]:
        by_index = sorted((i, c) for i, c, _ in self.lines)
        return [c for _, c in by_index]

    def write(self, path: Path) -> Path:
        path.write_text("".join(f"{i} {c} {t:.9g}\n" for i, c, t in self.lines))
        return path


def custom(model: str, step_s: float) -> Schedule:
    """ "custom:P:K": P parameters in K equal tensors, backward spread equally over them."""
    _, params, k = model.split(":")
    count = int(params) // int(k)
    per = step_s * (1 - EQUAL_FORWARD_SHARE) / int(k)
    return Schedule([(i, count, per) for i in range(int(k))], step_s * EQUAL_FORWARD_SHARE, "equal")


def schedule(model: str, profile: str, step_s: float) -> Schedule:
    """The model's tensors and backward times for a node whose step (forward, backward,
    update, no communication) takes step_s. The layout puts the last variable first (the
    core's order: what backprop produces first comes first)."""
    if model.startswith("custom:"):
        return custom(model, step_s)
    data = load(model)
    tensors = data["tensor_list"]
    n = len(tensors)
    index = {v: n - 1 - v for v in range(n)}  # layout: reverse variable order
    cpu_step = data["step_s"]["median"]
    cpu_backward = data["backward_s"]["median"]
    backward_share = cpu_backward / cpu_step
    if profile == "measured":
        order = sorted(range(n), key=lambda v: (tensors[v]["arrival_s"], -v))
        end = max(max(t["arrival_s"] for t in tensors), 1e-12)
        lines, before = [], 0.0
        for v in order:
            at = max(0.0, tensors[v]["arrival_s"])
            lines.append(
                (index[v], tensors[v]["elements"], (at - before) / end * step_s * backward_share)
            )
            before = max(before, at)
        return Schedule(lines, step_s * (1 - backward_share), profile)
    if profile == "flops":
        total = sum(t["backward_flops"] for t in tensors) or 1.0
        backward = step_s * backward_share
        lines = [
            (index[v], tensors[v]["elements"], tensors[v]["backward_flops"] / total * backward)
            for v in reversed(range(n))
        ]
        return Schedule(lines, step_s * (1 - backward_share), profile)
    if profile == "equal":
        heavy = [v for v in range(n) if tensors[v]["elements"] > EQUAL_MIN_ELEMENTS] or list(
            range(n)
        )
        per = step_s * (1 - EQUAL_FORWARD_SHARE) / len(heavy)
        lines = [
            (index[v], tensors[v]["elements"], per if v in heavy else 0.0)
            for v in reversed(range(n))
        ]
        return Schedule(lines, step_s * EQUAL_FORWARD_SHARE, profile)
    raise ValueError(f"unknown profile {profile!r} ({', '.join(PROFILES)})")


def gradient_bytes(model: str) -> int:
    return 4 * sum(schedule(model, "equal", 1.0).counts)
