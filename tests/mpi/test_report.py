"""The per-team report (config_team verbosity/perf_freq): a line every perf_freq
reductions of the team, from every rank (verbosity 2) or rank 0 (verbosity 1), whose
waiting time is consistent with the wall time measured around the calls, and a final
line at finalize. Each test runs its own init/finalize (no module fixture)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from mpi_helpers import MSGLEN, NTEAMS, NTHREAD_PER_TEAM, Checks, make_input, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

LINE = re.compile(
    r"^(final: )?Rank (\d+) has waited a total of ([0-9.]+) seconds for communication to "
    r"complete so far on team (\d+) \(calls = (\d+)\); ([0-9.]+) MB reduced at ([0-9.]+) GB/s$"
)


def report_lines(text: str) -> list[re.Match]:
    return [m for m in map(LINE.match, text.splitlines()) if m]


@pytest.mark.parametrize("verbosity", [1, 2])
def test_report_every_perf_freq_calls(capsys, verbosity):
    c = Checks()
    with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as s:
        mc.config_team(1, 0, 0, 0, verbosity=verbosity, perf_freq=3)
        capsys.readouterr()
        start = time.perf_counter()
        for call in range(7):  # one dtype: one reduction per call
            mc.gradients([make_input(s.rank, (3000,), np.float32, call)], 1)
        wall = time.perf_counter() - start
        periodic = report_lines(capsys.readouterr().out)
    finals = report_lines(capsys.readouterr().out)
    speaks = verbosity == 2 or s.rank == 0
    c.true(len(periodic) == (2 if speaks else 0), f"{len(periodic)} periodic lines")
    c.true([int(m[5]) for m in periodic] == ([3, 6] if speaks else []), "calls = 3, then 6")
    for m in periodic:
        c.true(int(m[2]) == s.rank and int(m[4]) == 1 and not m[1], f"line {m[0]!r}")
        # + 0.006: the line rounds to 0.01 s
        c.true(0 <= float(m[3]) <= wall + 0.006, f"waited {m[3]} s within {wall:.3f} s of calls")
        c.true(float(m[6]) == pytest.approx(int(m[5]) * 3000 * 4 / 1e6, abs=0.05), m[0])
    team1 = [m for m in finals if m[1] and int(m[4]) == 1]
    c.true(len(team1) == (1 if speaks else 0), f"final lines for team 1: {finals}")
    for m in team1:
        c.true(int(m[5]) == 7 and float(m[3]) <= wall + 0.006, f"final line {m[0]!r}")
    c.finish()


def test_quiet_by_default(capsys):
    c = Checks()
    with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as s:
        for call in range(4):
            mc.gradients([make_input(s.rank, (100,), np.float32, call)], 0)
    c.true(not report_lines(capsys.readouterr().out), "report lines without verbosity")
    c.finish()


def test_thread_cpu_counts_work_and_not_idle():
    """team_stats' thread_cpu_seconds (the team threads' own CPU clocks) grows with the
    reductions they carry out, and by little while the team is idle between calls: an
    idle team sleeps instead of polling."""
    with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as session:
        c = Checks()
        before = mc.team_stats(0)["thread_cpu_seconds"]
        big = np.ones(4 * MSGLEN, np.float32)  # past the caller's-thread sizes: the team's threads
        for _ in range(8):
            mc.gradients([big])
        worked = mc.team_stats(0)["thread_cpu_seconds"]
        if session.nranks > 1:
            c.true(worked > before, f"thread_cpu_seconds {before} -> {worked} after 8 reductions")
        time.sleep(1.0)
        idle = mc.team_stats(0)["thread_cpu_seconds"] - worked
        c.true(0 <= idle < 0.2, f"team threads used {idle:.3f} s of CPU in 1 s idle")
        c.finish()
