"""The ranks every synchronous step waits for, found from each rank's pace at finalize.

In a synchronous job every rank leaves each step's reduction at about the same moment,
so every rank has run about as long since init; what differs is how that time splits
between waiting inside ml_comm and everything else (the rank's own "compute": forward,
backward, data loading). A rank that is slower every step waits least: the others wait
for it. So each rank's compute time is the job's span less its own waits, and a rank
whose compute time exceeds the median rank's by ML_COMM_SLOW_RANK_PERCENT is named.

Why these numbers:
- The waits are the ones the periodic report prints (core/report.py picks them): the
  time a NumPy caller blocked in a reduction (wait_seconds), or for framework ops each
  reduction's time from its last input to its completion (exposed_seconds, which is
  what a rank whose inputs came early waits for the late one).
- The span is the median of the ranks' times from init to finalize, not each rank's
  own: a rank that works on after its last step (rank 0 writing a checkpoint) did not
  make any step wait, and the median ignores it.
- A rank named must also have cost at least MIN_LOST_SECONDS in all: on a short job a
  slow start of a fraction of a second is a large percentage but nothing to act on.
- Nothing is judged when a rank leaves after an uncaught exception: its error is what
  the job's output must show, and its numbers stop short.

At two ranks the median is the midpoint of the two, so the slower one shows half its
difference.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .pace import RankPace

VARIABLE = "ML_COMM_SLOW_RANK_PERCENT"
MIN_LOST_SECONDS = 1.0
SHOWN = 5  # ranks named in the line, worst first; the others are counted
ADVICE = "a node slow in every step sets the job's pace"


@dataclass(frozen=True)
class SlowRank:
    rank: int
    host: str
    percent: float  # compute time above the median rank's, in percent of it
    waited: float
    calls: int


@dataclass(frozen=True)
class Verdict:
    slow: list[SlowRank]  # worst first
    median_waited: float
    ranks: int


def judge(paces: Sequence[RankPace], percent: float) -> Verdict | None:
    """The ranks whose compute time exceeds the median rank's by `percent` or more (and
    MIN_LOST_SECONDS); None when nothing can be judged (one rank, no reductions, a rank
    that raised, or no time outside ml_comm at all)."""
    if percent <= 0 or len(paces) < 2 or any(p.raised for p in paces):
        return None
    if not any(p.calls for p in paces):
        return None
    span = statistics.median(p.elapsed for p in paces)
    median_waited = statistics.median(p.waited for p in paces)
    median_compute = span - median_waited
    if median_compute <= 0:
        return None
    slow = []
    for rank, p in enumerate(paces):
        lost = median_waited - p.waited  # the rank's compute time above the median's
        above = 100.0 * lost / median_compute
        if p.calls and above >= percent and lost >= MIN_LOST_SECONDS:
            slow.append(SlowRank(rank, p.host, above, p.waited, p.calls))
    slow.sort(key=lambda s: -s.percent)
    return Verdict(slow, median_waited, len(paces))


def _exclude(slow: Sequence[SlowRank]) -> str:
    hosts = list(dict.fromkeys(s.host for s in slow))
    return f"srun --exclude={','.join(hosts)}"


def line(verdict: Verdict | None, percent: float) -> str | None:
    """The one line rank 0 prints, or None when no rank is slow."""
    if verdict is None or not verdict.slow:
        return None
    median = verdict.median_waited
    if len(verdict.slow) == 1:
        s = verdict.slow[0]
        return (
            f"ml_comm: rank {s.rank} (host {s.host}) spent {s.percent:.1f} % more time outside "
            f"ml_comm than the median rank (waited {s.waited:.1f} s, median {median:.1f} s, "
            f"{s.calls} calls): every synchronous step waits for it; {ADVICE}: check it or "
            f"leave it out ({_exclude(verdict.slow)})"
        )
    shown = verdict.slow[:SHOWN]
    named = ", ".join(
        f"rank {s.rank} (host {s.host}) {s.percent:.1f} % (waited {s.waited:.1f} s, "
        f"{s.calls} calls)"
        for s in shown
    )
    more = len(verdict.slow) - len(shown)
    rest = f" and {more} more" if more else ""
    return (
        f"ml_comm: {len(verdict.slow)} of {verdict.ranks} ranks spent at least {percent:g} % more "
        f"time outside ml_comm than the median rank (which waited {median:.1f} s): {named}"
        f"{rest}; every synchronous step waits for them; {ADVICE}: check them or leave them "
        f"out ({_exclude(shown)})"
    )
