"""Median ratio (time_MPI / time_ml_comm) per size over repeated allreduce.py runs, as a
Markdown table: one column per group of runs, each cell "median (min–max)".

On a shared machine one sweep's ratio at a size can move by ±30 % from run to run; the
median of a few runs, with its spread, says more than any single run.

    .venv/bin/python benchmarks/ratio_table.py \\
        "4 nodes, gradients=benchmarks/results/testbed_4node_2gbit_gradients_r*.json" \\
        "4 nodes, allreduce_sum=benchmarks/results/testbed_4node_2gbit_allreduce_sum_r*.json"
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys

from allreduce import human_bytes


def ratios_by_size(paths: list[str]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["rows"]:
                out.setdefault(row["bytes"], []).append(row["ratio"])
    return out


def cell(values: list[float]) -> str:
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.2f}"
    return f"{med:.2f} ({min(values):.2f}–{max(values):.2f})"


def table(groups: list[tuple[str, list[str]]], from_bytes: int = 0) -> str:
    data = [(label, ratios_by_size(paths), len(paths)) for label, paths in groups]
    sizes = sorted({s for _, by_size, _ in data for s in by_size if s >= from_bytes})
    head = "| size | " + " | ".join(f"{label} ({n} runs)" for label, _, n in data) + " |"
    lines = [head, "|---:|" + "---:|" * len(data)]
    for s in sizes:
        cells = " | ".join(cell(by_size.get(s, [])) for _, by_size, _ in data)
        lines.append(f"| {human_bytes(s)} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("groups", nargs="+", metavar="LABEL=GLOB", help="a column: its runs' JSON")
    p.add_argument("--from-bytes", type=int, default=0, help="leave out smaller sizes")
    args = p.parse_args(argv)
    groups = []
    for g in args.groups:
        label, _, pattern = g.rpartition("=")
        paths = sorted(glob.glob(pattern))
        if not paths:
            p.error(f"no file matches {pattern!r}")
        groups.append((label or pattern, paths))
    print(table(groups, args.from_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
