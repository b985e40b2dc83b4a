"""The message of ml_comm/core/settings_check.py: each differing setting, each distinct value
and the ranks that hold it (pure functions; the 2-rank jobs are in
tests/faults/test_settings_job.py)."""

from __future__ import annotations

from ml_comm.core.settings_check import disagreements


def test_equal_settings_have_no_disagreement():
    same = {"nteams": "1", "ML_COMM_CHECK_LAYOUT": "1"}
    assert disagreements([dict(same) for _ in range(4)]) == []


def test_each_value_with_its_ranks():
    per_rank = [{"a": "1", "b": "x"}, {"a": "1", "b": "y"}, {"a": "2", "b": "x"}]
    per_rank += [{"a": "2", "b": "x"}, {"a": "2", "b": "x"}, {"a": "1", "b": "x"}]
    assert disagreements(per_rank) == [
        "a: ranks 0-1, 5: 1; ranks 2-4: 2",
        "b: ranks 0, 2-5: x; rank 1: y",
    ]
