"""The periodic per-team report that config_team(verbosity, perf_freq) asks for."""

from __future__ import annotations

import sys
from collections.abc import Callable


class TeamReporter:
    """Counts gradients() calls of one team and prints every perf_freq calls."""

    def __init__(self, team: int, rank: int):
        self.team = team
        self.rank = rank
        self.calls = 0

    def _speaks(self, verbosity: int) -> bool:
        return verbosity >= 2 or (verbosity == 1 and self.rank == 0)

    def line(self, stats: dict) -> str:
        busy = stats["busy_seconds"]
        rate = stats["bytes"] / busy / 1e9 if busy > 0 else 0.0
        return (
            f"Rank {self.rank} has waited a total of {stats['wait_seconds']:.2f} seconds for "
            f"communication to complete so far on team {self.team} (calls = {stats['calls']}); "
            f"{stats['bytes'] / 1e6:.1f} MB reduced at {rate:.2f} GB/s"
        )

    def step(self, config, stats: Callable[[], dict]) -> None:
        self.calls += 1
        if self._speaks(config.verbosity) and self.calls % config.perf_freq == 0:
            print(self.line(stats()), file=sys.stdout, flush=True)

    def summary(self, config, stats: dict) -> None:
        if self._speaks(config.verbosity) and stats["calls"]:
            print("final: " + self.line(stats), file=sys.stdout, flush=True)
