"""What `tools/dev.py test` prints last: one line with what failed, what passed and, for
every suite whose tests skipped, which and why (read from pytest's JUnit XML).

Pure functions only, so tools/tests/test_suite_summary.py checks them without running pytest.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field


@dataclass
class SuiteSkips:
    """How many of a suite's tests ran, which skipped, with pytest's reasons, and which
    failed."""

    total: int = 0
    skipped: int = 0
    reasons: list[str] = field(default_factory=list)  # distinct, in the order first seen
    failed: list[str] = field(default_factory=list)  # "module::test[params]", in report order

    @property
    def all_skipped(self) -> bool:
        return self.total > 0 and self.skipped == self.total


def _reason(message: str) -> str:
    # pytest writes "('path', line, 'Skipped: why')" for a skip raised at setup; keep `why`.
    text = message.strip()
    marker = "Skipped: "
    if marker in text:
        text = text.split(marker, 1)[1].rstrip("')\"")
    return " ".join(text.split())


def skips_from_junit(xml_text: str) -> SuiteSkips:
    """Count the test cases of a pytest --junit-xml report and collect the skip reasons."""
    out = SuiteSkips()
    for case in ET.fromstring(xml_text).iter("testcase"):
        out.total += 1
        if case.find("failure") is not None or case.find("error") is not None:
            module = (case.get("classname") or "").rsplit(".", 1)[-1]
            out.failed.append(f"{module}::{case.get('name')}")
        skip = case.find("skipped")
        if skip is None:
            continue
        out.skipped += 1
        reason = _reason(skip.get("message") or skip.text or "no reason given")
        if reason not in out.reasons:
            out.reasons.append(reason)
    return out


def failed_tests(reports: list[SuiteSkips], most: int = 4) -> str:
    """'; failed: mod::a, mod::b and 3 more' from the reports of a run's processes (each
    rank writes its own), each test once; '' when none names a failed test."""
    names = list(dict.fromkeys(name for r in reports for name in r.failed))
    if not names:
        return ""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return "; failed: " + ", ".join(names[:most]) + more


def matrix_failure(label: str, report: SuiteSkips | None) -> str | None:
    """Why a multi-rank run counts as failed although its exit status was 0: it wrote no
    report, ran no test, or skipped every test (then nothing was checked at that rank
    count). None when tests ran."""
    if report is None:
        return f"{label}: no test report (did the ranks start?)"
    if report.total == 0:
        return f"{label}: no test ran"
    if report.all_skipped:
        return f"{label}: every test skipped ({'; '.join(report.reasons)})"
    return None


def describe_skips(skips: dict[str, SuiteSkips]) -> str:
    """'testbed (all 9 tests: needs root), tfcnn (2 of 5 tests: ...)'; '' when none skipped."""
    parts = []
    for suite, s in skips.items():
        if s.skipped == 0:
            continue
        count = f"all {s.total} tests" if s.all_skipped else f"{s.skipped} of {s.total} tests"
        parts.append(f"{suite} ({count}: {'; '.join(s.reasons)})")
    return ", ".join(parts)


def summary_line(ran: list[str], failures: list[str], skips: dict[str, SuiteSkips]) -> str:
    """The final line: FAILED first when anything failed, then the skips with their reasons.

    A suite whose every test skipped is not counted among the ones that passed.
    """
    skipped = describe_skips(skips)
    if failures:
        line = "FAILED: " + ", ".join(failures)
    else:
        passed = [r for r in ran if not (r in skips and skips[r].all_skipped)]
        line = "all test runs passed: " + (", ".join(passed) or "none (every suite skipped)")
    return line + (f"; SKIPPED: {skipped}" if skipped else "; nothing skipped")
