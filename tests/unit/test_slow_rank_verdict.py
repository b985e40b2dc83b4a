"""The slow-rank verdict (ml_comm/core/slow_ranks.py) from given paces, and the record
each rank sends for it (core/pace.py)."""

from __future__ import annotations

import re

from ml_comm.core.pace import UNKNOWN, RankPace, unpack
from ml_comm.core.slow_ranks import judge, line


def paces(waits: list[float], elapsed: float = 100.0, calls: int = 1000) -> list[RankPace]:
    return [RankPace(elapsed, w, calls, False, f"nid{r:05d}") for r, w in enumerate(waits)]


def test_the_rank_the_others_wait_for_is_named():
    # Ranks 0, 1, 3 wait 10 s for rank 2: its compute is 10 s above the median's 90 s.
    text = line(judge(paces([10.0, 10.0, 0.0, 10.0]), 3.0), 3.0)
    assert text == (
        "ml_comm: rank 2 (host nid00002) spent 11.1 % more time outside ml_comm than the "
        "median rank (waited 0.0 s, median 10.0 s, 1000 calls): every synchronous step "
        "waits for it; a node slow in every step sets the job's pace: check it or leave it "
        "out (srun --exclude=nid00002)"
    )


def test_below_the_threshold_or_the_floor_nothing_is_said():
    assert line(judge(paces([10.0, 10.0, 8.0]), 3.0), 3.0) is None  # 2.2 %
    # 50 % above the median, but 0.5 s in all: nothing to act on.
    assert line(judge(paces([1.0, 1.0, 0.5], elapsed=2.0), 3.0), 3.0) is None
    assert line(judge(paces([10.0, 10.0, 0.0]), 0.0), 0.0) is None  # the setting 0


def test_a_rank_that_works_on_after_its_last_step_is_not_named():
    ranks = paces([5.0, 5.0, 5.0])
    ranks[0] = RankPace(160.0, 5.0, 1000, False, "nid00000")  # writes a checkpoint
    assert line(judge(ranks, 3.0), 3.0) is None


def test_nothing_is_judged_after_an_exception_or_without_reductions():
    ranks = paces([10.0, 10.0, 0.0])
    ranks[1] = RankPace(100.0, 10.0, 1000, True, "nid00001")
    assert judge(ranks, 3.0) is None
    assert judge(paces([10.0, 10.0, 0.0], calls=0), 3.0) is None
    assert judge([unpack(UNKNOWN)] + paces([10.0, 0.0]), 3.0) is None
    assert judge(paces([0.0]), 3.0) is None


def test_many_slow_ranks_are_counted_and_the_worst_named_first():
    waits = [20.0] * 9 + [10.0, 4.0, 8.0, 6.0, 2.0, 12.0, 14.0]
    text = line(judge(paces(waits), 3.0), 3.0)
    assert text.startswith("ml_comm: 7 of 16 ranks spent at least 3 % more time outside ml_comm")
    order = [int(r) for r in re.findall(r"rank (\d+) \(host", text)]
    assert order == [13, 10, 12, 11, 9], text
    assert "and 2 more;" in text
    assert text.endswith("(srun --exclude=nid00013,nid00010,nid00012,nid00011,nid00009)")


def test_the_record_round_trips():
    p = RankPace(12.5, 3.25, 77, False, "nid00017")
    assert unpack(p.pack()) == p
    assert len(UNKNOWN) == len(p.pack())
