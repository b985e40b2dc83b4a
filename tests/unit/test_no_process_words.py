"""No text of the repository speaks of how it was developed (numbered work items and
their steps, who did what, the machines it was developed on): what the code and the
documents say must stand without that history, which is git's. Every tracked text
file is scanned, this one included; a hit is reported as file:line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Written so that this file's own source does not match them.
PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(stop|issue|session|helper)[ -]?#?\d+\b",  # a numbered step or work item
        r"\bissues? #\d+",
        r"\bhelper-\d",
        r"\bissue[’']s\b",  # "the ... of the work item", e.g. its bound or its command
        r"\bdone[- ]when\b",
        r"\bthe\s+lead\b",
        r"\bdeveloper[’']?s\s+(bed|machine|box)\b",
    )
]
# Not clean yet: remove an entry once its text is.
NOT_SCANNED: set[str] = set()


def tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    files = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or name in NOT_SCANNED or not path.is_file():
            continue
        if b"\0" in path.read_bytes()[:8192]:  # binary
            continue
        files.append(path)
    return files


def hits(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if any(p.search(line) for p in PATTERNS):
            found.append((number, line.strip()))
    return found


def test_the_patterns_find_what_they_are_for():
    # "~" keeps this file's own text clean; it is taken out before the check.
    process_text = [
        t.replace("~", "")
        for t in (
            "the SSE2 baseline (benchmarks/RESULTS.md, sto~p 11)",
            "held the reduction back until then (Issue~ 14).",
            "see issue~ #3",
            "measured by helper~-2",
            "as Session~ 4 found",
            "the issue~'s bound: 30 s",
            'the command line of its "Done~ when"',
            "the Le~ad asked for it",
            "timed on the developer's be~d",
        )
    ]
    assert [t for t in process_text if not hits(t)] == []
    product_text = [
        "one init()..finalize() session of ml_comm",
        "tests/mpi/mpi_helpers.py",
        "every rank stops after the step in which a rank saw the signal",
        "the leader's signature; reductions of the leading segments",
        "a known issue of Open MPI 4",
    ]
    assert [t for t in product_text if hits(t)] == []


def test_no_process_words_in_tracked_files():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line}"
        for path in tracked_text_files()
        for number, line in hits(path.read_text(errors="replace"))
    ]
    assert not found, "development-process words:\n" + "\n".join(found)
