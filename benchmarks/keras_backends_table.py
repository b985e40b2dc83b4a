"""The table of benchmarks/keras_backends_scaling.py's RESULT lines (a keras.jsonl that
benchmarks/results/testbed_backends/run.sh writes): per backend, the 1- and 2-node
throughputs of each round, the 2-node efficiency (2-node images/s over twice the 1-node
figure of the same round) and the time a 2-node step spends beyond a 1-node step (the
reduction that backprop did not hide; the same batch per rank on both). A line may
start with a build's label ("A RESULT {...}": an A/B run), which then leads its case.

    python3 benchmarks/keras_backends_table.py benchmarks/results/testbed_backends/keras.jsonl

Only the standard library.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def rounds(lines: list[dict]) -> dict[str, list[tuple[dict, dict]]]:
    """case -> [(1-node result, 2-node result)] in the order run: each 2-node result with
    the backend's last 1-node result before it; a case is the backend, and on torch
    whether the gradients were handed over during backprop (runs that say so)."""
    last_one: dict[str, dict] = {}
    paired: dict[str, list[tuple[dict, dict]]] = {}
    for result in lines:
        backend = f"{result['build']} {result['backend']}".strip()
        if result["nranks"] == 1:
            last_one[backend] = result
        elif backend in last_one:
            case = backend
            if result.get("overlap_backprop") is not None:
                case += f", overlap {result['overlap_backprop']}"
            paired.setdefault(case, []).append((last_one[backend], result))
    return paired


def step_s(result: dict) -> float:
    return result["batch"] * result["nranks"] / result["images_per_s"]


def main(path: str) -> int:
    lines = []
    for line in Path(path).read_text().splitlines():
        build, found, result = line.partition("RESULT ")
        if found and " " not in build.strip():
            lines.append({**json.loads(result), "build": build.strip()})
    print(
        "| backend | 1 node, img/s | 2 nodes, img/s | efficiency (median) "
        "| 2-node step beyond 1-node (median) |"
    )
    print("|---|---:|---:|---:|---:|")
    for case, pairs in rounds(lines).items():
        one = [a["images_per_s"] for a, _ in pairs]
        two = [b["images_per_s"] for _, b in pairs]
        eff = [b["images_per_s"] / (2 * a["images_per_s"]) * 100 for a, b in pairs]
        extra = [step_s(b) - step_s(a) for a, b in pairs]
        print(
            f"| {case} | {min(one):.1f}-{max(one):.1f} | {min(two):.1f}-{max(two):.1f} "
            f"| {min(eff):.1f}-{max(eff):.1f} % ({statistics.median(eff):.1f}) "
            f"| {min(extra):.3f}-{max(extra):.3f} s ({statistics.median(extra):.3f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
