"""Ranks whose config_team differs (alg, ksteps, max_steps, compression), or one rank that
never called it: every rank raises MLCommError within 10 s, naming the setting, each value
and its ranks, instead of hanging (ranks on different algorithms exchange different
messages) or returning a pipelined step's zeros on some ranks only. The agreement check
compares the team's schedule on every request (csrc/agree/verdict*.c); the team then works
again once the ranks agree.

Every test ends with the same calls on every rank (config_team alike, a reduction, and
Checks.finish()).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi_helpers import Checks, expected_average, make_input

import ml_comm as mc

pytestmark = pytest.mark.mpi

LIMIT_S = 10.0


def ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {ranks[0]}-{ranks[-1]}"


# name: (config_team arguments of the other ranks, of the last rank (None: it skips
# config_team), the texts every rank's message must hold, with {others} and {last}).
CASES = {
    "alg": (
        dict(alg=mc.ALG_RING, ksteps=0, max_steps=0),
        dict(alg=mc.ALG_RECURSIVE_DOUBLING, ksteps=0, max_steps=0),
        ["config_team alg: {others}: ring; {last}: recursive_doubling"],
    ),
    "ksteps": (
        dict(alg=mc.ALG_AUTO, ksteps=0, max_steps=4),
        dict(alg=mc.ALG_AUTO, ksteps=4, max_steps=4),
        ["config_team ksteps: {others}: 0; {last}: 4"],
    ),
    "max_steps": (
        dict(alg=mc.ALG_AUTO, ksteps=0, max_steps=0),
        dict(alg=mc.ALG_AUTO, ksteps=0, max_steps=3),
        ["config_team max_steps: {others}: 0; {last}: 3"],
    ),
    "compression": (
        dict(alg=mc.ALG_AUTO, ksteps=0, max_steps=0, compression="none"),
        dict(alg=mc.ALG_AUTO, ksteps=0, max_steps=0, compression="bf16"),
        ["{last} submitted", "compression=bf16", "{others} submitted"],
    ),
    "skipped": (
        dict(alg=mc.ALG_RING, ksteps=2, max_steps=5),
        None,
        [
            "config_team alg: {others}: ring; {last}: auto",
            "config_team ksteps: {others}: 2; {last}: 0",
        ],
    ),
}


def configure_alike() -> None:
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")


def configure_unlike(session, case: str) -> None:
    """config_team as CASES says for this rank (the last rank differs or skips it)."""
    mine, theirs, _ = CASES[case]
    args = theirs if session.rank == session.nranks - 1 else mine
    if args is not None:
        mc.config_team(0, args["alg"], args["ksteps"], args["max_steps"],
                       compression=args.get("compression"))  # fmt: skip


def expect_named(c: Checks, session, case: str, call, errors=(mc.MismatchError,)) -> None:
    """call() raises on this rank at its first or (a pipelined rank, whose first call
    only starts the reduction) second try, within LIMIT_S, with a message naming the
    setting, its values and their ranks."""
    start, text = time.monotonic(), None
    for _ in range(2):
        try:
            call()
        except errors as e:
            text = str(e)
            break
    seconds = time.monotonic() - start
    if not c.true(text is not None, f"{case}: two calls returned without an error"):
        return
    c.true(seconds < LIMIT_S, f"{case}: raised after {seconds:.1f} s")
    last = session.nranks - 1
    names = {"others": ranks_text(list(range(last))), "last": ranks_text([last])}
    c.true("ranks disagree on team 0 request" in text, text)
    for w in CASES[case][2]:
        c.true(w.format(**names) in text, f"the message lacks {w.format(**names)!r}: {text!r}")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("count", [10, 1000, 20011])
def test_config_team_differs(session, case, count):
    if session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    configure_unlike(session, case)
    grads = [make_input(session.rank, (count,), np.float32, 3)]
    expect_named(c, session, case, lambda: mc.gradients(grads))
    configure_alike()
    out = mc.gradients(grads)
    c.equal(out[0], expected_average((count,), np.float32, session.nranks, 3), "after the mismatch")
    c.finish()
