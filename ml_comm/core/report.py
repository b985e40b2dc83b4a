"""The periodic per-team report that config_team(verbosity, perf_freq) asks for.

The core calls back after every perf_freq-th reduction a team finishes, from
whichever thread finished it, so the report follows the reductions that really
ran: also inside tf.function and compat.v1 graphs, where Python runs once per trace.
"""

from __future__ import annotations

import sys

from .._core import ffi, lib


class TeamReporter:
    """Prints one team's counters: every perf_freq reductions, and at finalize."""

    def __init__(self, team: int, rank: int, framework_ops: bool = False):
        self.team = team
        self.rank = rank
        # NumPy callers block in mlc_request_wait; framework ops never block, and what
        # they wait for is a reduction's time after its last input arrived.
        self.waited_key = "exposed_seconds" if framework_ops else "wait_seconds"
        self._handle = ffi.new_handle(self)

    def speaks(self, verbosity: int) -> bool:
        return verbosity >= 2 or (verbosity == 1 and self.rank == 0)

    def configure(self, handle, config) -> None:
        every = config.perf_freq if self.speaks(config.verbosity) else 0
        lib.mlc_team_set_report(handle, every, lib.mlc_py_report, self._handle)

    def line(self, stats: dict) -> str:
        busy = stats["busy_seconds"]
        rate = stats["bytes"] / busy / 1e9 if busy > 0 else 0.0
        return (
            f"Rank {self.rank} has waited a total of {stats[self.waited_key]:.2f} seconds for "
            f"communication to complete so far on team {self.team} (calls = {stats['calls']}); "
            f"{stats['bytes'] / 1e6:.1f} MB reduced at {rate:.2f} GB/s"
        )

    def summary(self, config, stats: dict) -> None:
        if self.speaks(config.verbosity) and stats["calls"]:
            print("final: " + self.line(stats), file=sys.stdout, flush=True)


def stats_dict(s) -> dict:
    return {
        "calls": s.calls,
        "bytes": s.bytes,
        "busy_seconds": s.busy_seconds,
        "wait_seconds": s.wait_seconds,
        "exposed_seconds": s.exposed_seconds,
        "thread_cpu_seconds": s.thread_cpu_seconds,
    }


@ffi.def_extern()
def mlc_py_report(user, stats) -> None:
    reporter = ffi.from_handle(user)
    print(reporter.line(stats_dict(stats)), file=sys.stdout, flush=True)
