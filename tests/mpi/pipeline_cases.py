"""Expected results of pipelined teams, written out by hand from the table in docs/pipelined.md
(not computed from mlc_step_phase, which tests/unit/test_step_phase.py checks)."""

from __future__ import annotations

import numpy as np
from mpi_helpers import MSGLEN, expected_average, make_input

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
