"""The projections' table from the JSON files `tools/dev.py project --json` wrote: one row
per node count, platform and model, a column per scheme (median [5-95 %] and replicates).

    python3 tools/project_table.py benchmarks/results/scale_projection/*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = {
    "auto": "ml_comm",
    "auto pipelined": "ml_comm pipelined",
    "Horovod (fusion, cycle, ring)": "Horovod's scheme",
    "allreduce after backprop (model, Rabenseifner)": "one allreduce after backprop",
}


def cells(paths: list[Path]) -> dict[tuple, dict[str, str]]:
    table: dict[tuple, dict[str, str]] = {}
    for path in paths:
        out = json.loads(path.read_text())
        spare = out.get("spare_nodes") or 0
        for row in out["rows"]:
            if row["algorithm"] not in COLUMNS or "band_lo" not in row:
                continue
            key = (row["nodes"], out["platform"], out["model"], spare)
            table.setdefault(key, {})[COLUMNS[row["algorithm"]]] = (
                f"{row['efficiency']:.1%} [{row['band_lo']:.1%}, {row['band_hi']:.1%}] "
                f"({row['replicates']})"
            )
    return table


def main(argv: list[str]) -> int:
    table = cells([Path(a) for a in argv])
    names = list(COLUMNS.values())
    print("| nodes | platform | model | spare nodes | " + " | ".join(names) + " |")
    print("|---:|---|---|---:|" + "---:|" * len(names))
    for key in sorted(table):
        nodes, platform, model, spare = key
        row = [table[key].get(n, "not run") for n in names]
        print(f"| {nodes:,} | {platform} | {model} | {spare:.0%} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
