"""tools/horovod_suite.py's pure parts: the expected list as the tree has it, how the ranks'
records combine into one outcome, and how an outcome is judged against the list."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import horovod_suite as suite  # noqa: E402


def test_every_expected_entry_has_a_reason():
    expected = suite.Expected.load(2)
    assert expected.fail and expected.skip
    assert set(suite.Expected.load(3).fail) > set(expected.fail)  # entries for 3 ranks only
    for why in [*expected.fail.values(), *(why for _, why in expected.skip.values())]:
        kind, _, reason = why.partition(": ")
        assert kind and len(reason) > 20, why
        assert "lacks" not in reason, why


def test_ranks_combine_into_one_outcome():
    passed = {"outcome": "passed"}
    failed = {"outcome": "failed", "message": "AssertionError"}
    assert suite.combine([passed, passed])["outcome"] == "passed"
    assert suite.combine([passed, failed]) == {
        "outcome": "failed",
        "message": "ranks [1]: AssertionError",
    }
    assert suite.combine([passed, None])["outcome"] == "crashed"
    assert suite.combine([{"outcome": "timeout"}, None])["outcome"] == "timeout"
    skipped = {"outcome": "skipped", "reason": "x"}
    assert suite.combine([skipped, passed])["outcome"] == "failed"  # ranks that differ


def test_judged_against_the_list():
    expected = suite.Expected(
        fail={"f.py::T::test_a": "k: r"}, skip={"f.py::T::*gpu*": ("No GPUs available", "k: r")}
    )
    gpu = {"outcome": "skipped", "reason": "No GPUs available"}
    assert suite.judge("f.py::T::test_x_gpu", gpu, expected).status == "expected-skip"
    assert suite.judge("f.py::T::test_x_cpu", gpu, expected).status == "unexpected-skip"
    other = {"outcome": "skipped", "reason": "something else"}
    assert suite.judge("f.py::T::test_x_gpu", other, expected).status == "unexpected-skip"
    assert (
        suite.judge("f.py::T::test_a", {"outcome": "xfailed"}, expected).status == "expected-fail"
    )
    assert suite.judge("f.py::T::test_a", {"outcome": "xpassed"}, expected).status == "xpassed"
    assert suite.judge("f.py::T::test_b", {"outcome": "timeout"}, expected).status == "timeout"


def test_a_missing_source_is_said_and_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ML_COMM_HOROVOD_TESTS", str(tmp_path / "none"))
    assert suite.run([("test_tensorflow.py", 2)], 10, full=False) == suite.SKIPPED_EXIT
    assert "not in" in capsys.readouterr().out
