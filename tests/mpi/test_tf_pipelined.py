"""Pipelined teams through the TensorFlow op, in eager mode, inside tf.function and in
a tf.compat.v1 graph: each call returns the documented averages (the same table as the
NumPy tests), a synchronous team reducing in the same graph alongside."""

from __future__ import annotations

import pytest
import tensorflow as tf
from mpi_helpers import Checks
from pipeline_cases import CASES, SPECS, call_inputs, expected, leave_a_marked_step_early
from tf_helpers import MODES, module_session_fixture, run_in_mode, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()


# Every schedule inside tf.function; the one that passes through every phase in the
# other modes too (each mode builds its graphs differently).
MODE_CASES = [("function", *case) for case in CASES] + [
    (mode, *CASES[-1]) for mode in MODES if mode != "function"
]


@pytest.mark.parametrize(
    ("mode", "ksteps", "max_steps", "returns"),
    MODE_CASES,
    ids=[f"{m}-{k},{ms}" for m, k, ms, _ in MODE_CASES],
)
def test_each_call_returns_the_documented_averages(tf_session, mode, ksteps, max_steps, returns):
    mc.config_team(1, 0, ksteps, max_steps)
    try:
        runs = [call_inputs(tf_session.rank, call) for call in range(len(returns))]
        results = run_in_mode(mode, lambda ts: mc.gradients(ts, 0) + mc.gradients(ts, 1), runs)
    finally:
        mc.config_team(1, 0, 0, 0)
    c = Checks()
    n = len(SPECS)
    c.true(len(results) == len(returns), f"{len(results)} calls ran")
    for call, (calls, outs) in enumerate(zip(returns, results)):
        c.true(len(outs) == 2 * n, f"{mode} call {call}: {len(outs)} results")
        for i, (got, want) in enumerate(zip(outs[n:], expected(tf_session.nranks, calls))):
            c.equal(got, want, f"{mode} call {call} gradient {i} on the pipelined team")
        for i, (got, want) in enumerate(zip(outs[:n], expected(tf_session.nranks, (call,)))):
            c.equal(got, want, f"{mode} call {call} gradient {i} on the synchronous team")
    c.finish()


def test_a_retraced_function_continues_the_pipeline(tf_session):
    """The pipeline belongs to the team and the gradients' layout, not to one trace."""
    mc.config_team(1, 0, 0, 10)
    c = Checks()
    try:
        for call in range(3):
            f = tf.function(lambda ts: mc.gradients(ts, 1))  # a new trace every call
            outs = f([tf.constant(a) for a in call_inputs(tf_session.rank, call)])
            want = expected(tf_session.nranks, () if call == 0 else (call - 1,))
            for i, (got, w) in enumerate(zip(outs, want)):
                c.equal(got.numpy(), w, f"call {call} gradient {i}")
    finally:
        mc.config_team(1, 0, 0, 0)
    c.finish()


def test_report_counts_the_reductions_a_graph_runs(tf_session, capsys):
    """Python traces once; the report still follows the reductions that ran."""
    mc.config_team(1, 0, 0, 10, verbosity=2, perf_freq=2)
    c = Checks()
    try:
        f = tf.function(lambda ts: mc.gradients(ts, 1))
        before = mc.team_stats(1)["calls"]  # earlier tests reduced on team 1 too
        capsys.readouterr()
        for call in range(5):  # one dtype: one reduction per call
            f([tf.constant(a) for a in call_inputs(tf_session.rank, call)[:1]])
    finally:
        mc.config_team(1, 0, 0, 0)  # waits for the last call's reduction, still in flight
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "has waited" in ln]
    due = [k for k in range(before + 1, before + 6) if k % 2 == 0]
    c.true(len(lines) == len(due), f"report lines: {lines}, due at calls {due}")
    c.true(all(f"team 1 (calls = {k})" in ln for k, ln in zip(due, lines)), f"{due}: {lines}")
    c.finish()


def test_a_rank_that_leaves_a_marked_step_early_realigns(tf_session):
    """Eager calls inside ml_comm.step carry the step to the op (as NumPy's calls do)."""

    def gradients(arrays):
        return [to_numpy(t) for t in mc.gradients([tf.constant(a) for a in arrays], 1)]

    mc.config_team(1, 0, -1, 6)
    c = Checks()
    try:
        leave_a_marked_step_early(c, tf_session.rank, tf_session.nranks, gradients)
    finally:
        mc.config_team(1, 0, 0, 0)
    c.finish()
