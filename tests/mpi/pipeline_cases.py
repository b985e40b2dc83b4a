"""Expected results of pipelined teams, written out by hand from the table in docs/pipelined.md
(not computed from mlc_step_phase, which tests/unit/test_step_phase.py checks)."""

from __future__ import annotations

import numpy as np
from mpi_helpers import MSGLEN, expected_average, make_input

import ml_comm as mc

# (ksteps, max_steps, for each of 6 calls the calls whose averages it returns)
CASES = [
    (0, 0, [(0,), (1,), (2,), (3,), (4,), (5,)]),  # default: synchronous
    (2, 6, [(0,), (1,), (), (2,), (3,), (4,)]),  # 2 synchronous, then pipelined
    (0, 6, [(), (0,), (1,), (2,), (3,), (4,)]),  # pipelined from the start
    (-2, 6, [(), (0,), (1,), (2,), (3, 4), (5,)]),  # synchronous for the last 2 of 6
]
CASE_IDS = [f"ksteps={k},max_steps={m}" for k, m, _ in CASES]

# Mixed dtypes, one gradient larger than the fusion buffer.
SPECS = [((5,), np.float32), ((3, 4), np.float64), ((MSGLEN + 1,), np.float32), ((2, 2), np.int64)]


def call_inputs(rank: int, call: int) -> list[np.ndarray]:
    return [make_input(rank, shape, dt, seed=call) for shape, dt in SPECS]


def expected(nranks: int, calls: tuple[int, ...]) -> list[np.ndarray]:
    out = []
    for shape, dt in SPECS:
        total = np.zeros(shape, dt)
        for call in calls:
            total = total + expected_average(shape, dt, nranks, seed=call)
        out.append(total)
    return out


def leave_a_marked_step_early(c, rank: int, nranks: int, gradients) -> None:
    """Steps marked with ml_comm.step on a team configured ksteps=-1, max_steps=6;
    gradients(arrays) makes one call on it, of several dtypes (a reduction each, all
    in flight at once on the ranks still pipelining). The last rank raises in step 2
    before its call and goes on. The others' reduction of step 2 finds them a step
    behind: their step 3 raises, naming that rank, and still starts its own reduction,
    which meets the last rank's step 3. Every rank returns the same averages in the same
    order (none of step 2's). The last rank's calls stay one behind in the schedule: it
    leaves the pipeline a step later, returning step 5's average with step 6's."""
    last, failing = nranks - 1, 2
    others = {0: (), 1: (0,), 2: (1,), 3: "raises", 4: (3,), 5: (4, 5), 6: (6,)}
    late = {0: (), 1: (0,), 2: "left", 3: (1,), 4: (3,), 5: (4,), 6: (5, 6)}
    returns = late if rank == last or nranks == 1 else others
    for s in range(7):
        try:
            with mc.step(s + 1):
                if rank == last and s == failing:
                    raise RuntimeError("a bad batch on this rank")
                got = gradients(call_inputs(rank, s))
        except mc.MismatchError as exc:
            c.true(returns[s] == "raises", f"step {s}: raised {exc}")
            c.true(f"rank {last} is at step {s + 1}" in str(exc), f"names the rank: {exc}")
            continue
        except RuntimeError as exc:
            c.true(returns[s] == "left", f"step {s}: raised its own {exc}")
            continue
        c.true(isinstance(returns[s], tuple), f"step {s}: returned where it should not")
        wants = expected(nranks, returns[s])
        c.true(len(got) == len(wants), f"step {s}: {len(got)} results")
        for i, (g, want) in enumerate(zip(got, wants)):
            c.equal(g, want, f"step {s} gradient {i}")
