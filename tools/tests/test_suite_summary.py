"""The last line of `tools/dev.py test` (tools/suite_summary.py): every suite whose tests
skipped is named with pytest's reason, and a suite that skipped entirely never counts as
passed."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from suite_summary import (  # noqa: E402
    SuiteSkips,
    describe_skips,
    failed_tests,
    skips_from_junit,
    summary_line,
)


def junit(*cases: str) -> str:
    """A pytest --junit-xml report (the shape pytest 8 writes) holding these test cases."""
    body = "".join(cases)
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        f'<testsuite name="pytest" tests="{len(cases)}">{body}</testsuite></testsuites>'
    )


def passed(name: str) -> str:
    return f'<testcase classname="tests.x" name="{name}" time="0.1"/>'


def skipped(name: str, message: str) -> str:
    return (
        f'<testcase classname="tests.x" name="{name}" time="0.0">'
        f'<skipped type="pytest.skip" message="{message}">x.py:3: {message}</skipped></testcase>'
    )


NOT_ROOT = "the test bed needs root (network namespaces, veths, Slurm daemons)"


def failed(name: str, kind: str = "failure") -> str:
    return (
        f'<testcase classname="tests.mpi.test_x" name="{name}" time="0.1">'
        f'<{kind} message="assert 0">x.py:3: AssertionError</{kind}></testcase>'
    )


def test_failed_tests_are_named_once_across_the_ranks_reports():
    rank0 = skips_from_junit(junit(passed("a"), failed("b[2]"), failed("c", "error")))
    rank1 = skips_from_junit(junit(failed("b[2]"), failed("d")))
    assert rank0.failed == ["test_x::b[2]", "test_x::c"]
    assert failed_tests([rank0, rank1]) == "; failed: test_x::b[2], test_x::c, test_x::d"
    assert failed_tests([rank0, rank1], most=1) == "; failed: test_x::b[2] and 2 more"
    assert failed_tests([skips_from_junit(junit(passed("a")))]) == ""


def test_a_suite_that_skipped_entirely_is_counted_with_its_one_reason():
    s = skips_from_junit(junit(*(skipped(f"t{i}", NOT_ROOT) for i in range(12))))
    assert (s.total, s.skipped, s.reasons, s.all_skipped) == (12, 12, [NOT_ROOT], True)


def test_partial_skips_keep_distinct_reasons_in_order():
    s = skips_from_junit(
        junit(passed("a"), skipped("b", "no GPU"), skipped("c", "slow"), skipped("d", "no GPU"))
    )
    assert (s.total, s.skipped, s.reasons, s.all_skipped) == (4, 3, ["no GPU", "slow"], False)


def test_skip_raised_at_setup_keeps_only_the_reason():
    message = "('tests/x.py', 12, 'Skipped: TF_CNN_BENCHMARKS_DIR is not set')"
    s = skips_from_junit(junit(skipped("a", message)))
    assert s.reasons == ["TF_CNN_BENCHMARKS_DIR is not set"]


def test_nothing_skipped_says_so():
    skips = {"unit": skips_from_junit(junit(passed("a"), passed("b")))}
    assert describe_skips(skips) == ""
    line = summary_line(["ruff", "unit"], [], skips)
    assert line == "all test runs passed: ruff, unit; nothing skipped"


def test_skipped_suites_are_named_with_why_and_not_listed_as_passed():
    skips = {
        "unit": SuiteSkips(total=50, skipped=0),
        "testbed": SuiteSkips(total=12, skipped=12, reasons=[NOT_ROOT]),
        "tfcnn": SuiteSkips(total=5, skipped=2, reasons=["TF_CNN_BENCHMARKS_DIR is not set"]),
    }
    line = summary_line(["unit", "testbed", "tfcnn"], [], skips)
    assert line == (
        "all test runs passed: unit, tfcnn; SKIPPED: "
        f"testbed (all 12 tests: {NOT_ROOT}), "
        "tfcnn (2 of 5 tests: TF_CNN_BENCHMARKS_DIR is not set)"
    )
    assert "\n" not in line  # the final line stays one line


def test_failures_come_first_and_the_skips_still_follow():
    skips = {"testbed": SuiteSkips(total=3, skipped=3, reasons=["ML_COMM_SKIP_TESTBED=1"])}
    line = summary_line(["unit", "testbed"], ["unit"], skips)
    assert line == "FAILED: unit; SKIPPED: testbed (all 3 tests: ML_COMM_SKIP_TESTBED=1)"


def test_a_suite_without_a_report_is_listed_as_it_ran():
    # e.g. pytest crashed before writing its JUnit file: no skips known, nothing invented
    assert summary_line(["unit", "testbed"], [], {}) == (
        "all test runs passed: unit, testbed; nothing skipped"
    )


def test_a_multi_rank_run_that_checked_nothing_fails():
    from suite_summary import matrix_failure

    assert (
        matrix_failure("mpi n=2", skips_from_junit(junit(passed("a"), skipped("b", "no")))) is None
    )
    assert matrix_failure("mpi n=2", None) == "mpi n=2: no test report (did the ranks start?)"
    assert matrix_failure("mpi n=3", skips_from_junit(junit())) == "mpi n=3: no test ran"
    report = skips_from_junit(junit(skipped("a", "needs MPI"), skipped("b", "needs MPI")))
    assert matrix_failure("mpi n=4", report) == "mpi n=4: every test skipped (needs MPI)"
