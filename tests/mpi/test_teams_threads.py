"""Several teams driven at once from several Python threads (the GAN case: one team
per model). Teams are independent: ranks may reach step k of team 1 and step j of
team 2 in any interleaving, and each team must still give exact results."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from mpi_helpers import DTYPES, Checks, expected_average, make_input, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

NTEAMS = 3
NTHREAD_PER_TEAM = 2
MSGLEN = 2048
ITERATIONS = 20
JOIN_TIMEOUT_S = 240
FAILING_CALLS = 300  # per team, at once: the messages' writes and reads interleave


@pytest.fixture(scope="module")
def session():
    with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as s:
        yield s


def team_specs(team, n):
    """Per team: a different mix of shapes and dtypes (team 0 is over msglen)."""
    if team == 0:
        return [((MSGLEN + 501,), DTYPES[0]), ((7,), DTYPES[0]), ((1,), DTYPES[0])]
    if team == 1:
        return [((n + 1, 3), DTYPES[2]), ((257,), DTYPES[3]), ((0,), DTYPES[4]), ((99,), DTYPES[4])]
    return [((1001,), DTYPES[1]), ((n,), DTYPES[5]), ((5, 0, 2), DTYPES[1])]


def run_team(session, team, iterations, failures, results, use_average=False):
    """Body of one Python thread: `iterations` reductions on its own team with
    data specific to (team, iteration)."""
    try:
        specs = team_specs(team, session.nranks)
        c = _LocalChecks()
        for it in range(iterations):
            seeds = [1000 * team + 10 * it + k for k in range(len(specs))]
            grads = [make_input(session.rank, s, dt, seed) for (s, dt), seed in zip(specs, seeds)]
            if use_average:
                out = [mc.average(g, team=team) for g in grads]
            else:
                out = mc.gradients(grads, team=team)
            for k, ((s, dt), seed, o) in enumerate(zip(specs, seeds, out)):
                want = expected_average(s, dt, session.nranks, seed)
                c.equal(o, want, f"team {team} iteration {it} array {k}")
            results.append(out)
        failures.extend(c.failures)
    except BaseException as e:  # noqa: BLE001 - reported by the main thread
        failures.append(f"team {team}: {type(e).__name__}: {e}")


class _LocalChecks(Checks):
    """Checks without the communicator: usable from worker threads."""

    def __init__(self):  # noqa: D107 - no collective set-up
        self.failures = []


def run_threads(c, session, teams, iterations, use_average=False):
    failures = {t: [] for t in teams}
    results = {t: [] for t in teams}
    threads = [
        threading.Thread(
            target=run_team,
            args=(session, t, iterations, failures[t], results[t], use_average),
            name=f"team-{t}",
            daemon=True,
        )
        for t in teams
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(JOIN_TIMEOUT_S)
        c.true(not th.is_alive(), f"{th.name} still running after {JOIN_TIMEOUT_S} s (hang?)")
    for t in teams:
        c.failures.extend(failures[t])
        c.true(len(results[t]) == iterations, f"team {t}: {len(results[t])} of {iterations} done")
    # Bit-identical across ranks, checked once all threads are done.
    c.same_on_all_ranks([a for t in teams for out in results[t] for a in out], "threaded results")


def test_teams_concurrently_from_threads(session):
    c = Checks()
    run_threads(c, session, list(range(NTEAMS)), ITERATIONS)
    c.finish()


def test_average_concurrently_from_threads(session):
    c = Checks()
    run_threads(c, session, list(range(NTEAMS)), 5, use_average=True)
    c.finish()


def test_two_teams_concurrently_third_idle(session):
    c = Checks()
    run_threads(c, session, [0, 2], ITERATIONS)
    c.finish()


def test_teams_sequentially_from_main_thread(session):
    """Each team on its own, then the same data on every team: same bits."""
    c = Checks()
    data = [
        make_input(session.rank, (3001,), DTYPES[0], 7),
        make_input(session.rank, (5,), DTYPES[5], 8),
    ]
    outs = [mc.gradients(data, team=t) for t in range(NTEAMS)]
    c.equal(outs[0][0], expected_average((3001,), DTYPES[0], session.nranks, 7), "team 0")
    c.equal(outs[0][1], expected_average((5,), DTYPES[5], session.nranks, 8), "team 0")
    for t in range(1, NTEAMS):
        for k in range(2):
            c.equal(outs[t][k], outs[0][k], f"team {t} array {k} vs team 0")
    c.finish()


def test_last_team_valid_next_is_not(session):
    c = Checks()
    x = make_input(session.rank, (3,), DTYPES[0], 1)
    out = mc.gradients([x], team=NTEAMS - 1)
    c.equal(out[0], expected_average((3,), DTYPES[0], session.nranks, 1), "last team")
    c.raises(ValueError, mc.gradients, [x], team=NTEAMS, words=[str(NTEAMS)])
    c.finish()


def test_teams_failing_at_once_keep_their_own_messages(session):
    """Two teams, each driven by its own thread, fail at the same time (rank 0 submits
    another size than the others): each error names its own team and its own sizes. The
    calls release the GIL while they run, so one error buffer shared by the teams would
    let one team's message overwrite the other's."""
    n, rank = mc.get_nranks(), mc.get_rank()
    if n == 1:
        pytest.skip("needs two ranks")
    c = Checks()
    errors: dict[int, list[str]] = {0: [], 1: []}
    start = threading.Barrier(2)

    def fail_on(team: int) -> None:
        size = 100 * (team + 1) + (1 if rank == 0 else 0)
        start.wait()
        for _ in range(FAILING_CALLS):
            try:
                mc.gradients([np.ones(size, np.float32)], team)
            except mc.MLCommError as e:
                errors[team].append(str(e))

    threads = [threading.Thread(target=fail_on, args=(t,)) for t in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    c.true(not any(t.is_alive() for t in threads), "both threads ended")
    for team in (0, 1):
        own = (
            f"team {team} request",
            f"{100 * (team + 1) + 1} float32",
            f"{100 * (team + 1)} float32",
        )
        c.true(
            len(errors[team]) == FAILING_CALLS,
            f"team {team}: every call raised ({len(errors[team])})",
        )
        for e in errors[team]:
            c.true(all(w in e for w in own), f"team {team}'s error names its own calls: {e}")
    c.finish()
