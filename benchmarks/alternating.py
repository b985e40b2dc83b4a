"""The report of a benchmark that alternates paths call by call in one run
(backend_hooks.py, ddp_step.py): each path's median time per call, the slowest rank's,
its ratio to the baseline path, and the elements it got wrong (summed over the ranks)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def report(comm, mpi, times, wrong, baseline, header, json_path=None, extra=None):
    """Collective over comm (mpi4py; mpi: its MPI module). times: {path: [seconds]},
    wrong: {path: this rank's wrong elements}. Rank 0 prints `header` (lines, "# "
    prefixed) and the table, and writes the figures to json_path. Returns the summed
    wrong counts."""
    medians = {name: statistics.median(t) for name, t in times.items()}
    slowest = {name: comm.allreduce(m, op=mpi.MAX) for name, m in medians.items()}
    wrong = {name: comm.allreduce(w) for name, w in wrong.items()}
    if comm.rank == 0:
        for line in header:
            print(f"# {line}")
        print(f"{'path':>8} {'median_ms':>10} {'vs_' + baseline:>10} {'#wrong':>7}")
        for name in times:
            ratio = slowest[name] / slowest[baseline]
            print(f"{name:>8} {1e3 * slowest[name]:10.2f} {ratio:10.3f} {wrong[name]:7d}")
        if json_path:
            figures = {**(extra or {}), "median_s": slowest, "wrong": wrong}
            Path(json_path).write_text(json.dumps(figures))
    return wrong
