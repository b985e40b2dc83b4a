"""Ranks that run different numbers of steps end the job within seconds with an error
that says so, and a rank that leaves while the others wait in barrier() ends the job.
Plain pytest: each test launches a 2-rank job under a timeout."""

from __future__ import annotations

import re
import time

import pytest
from jobs import mpiexec_job, wait_gone

SCRIPT = "uneven_steps_job.py"
TIMEOUT_S = 120


def ended_with(job, within_s: float, patterns: list[str]) -> None:
    assert job.returncode is not None, f"the job hung\n{job.detail()}"
    assert job.returncode != 0, f"the job reported success\n{job.detail()}"
    assert job.seconds < within_s, f"the job took {job.seconds:.1f} s\n{job.detail()}"
    for pattern in patterns:
        assert re.search(pattern, job.output), f"output lacks {pattern!r}\n{job.detail()}"
    assert not wait_gone(job.token), f"processes left behind\n{job.detail()}"


def test_departure_during_barrier_ends_the_job():
    job = mpiexec_job(2, SCRIPT, "barrier_departure", timeout=TIMEOUT_S)
    ended = time.monotonic()  # the same clock as the ranks' (CLOCK_MONOTONIC)
    ended_with(job, TIMEOUT_S, [r"rank 1 of 2 is leaving .* rank 0 waits for it in barrier\(\)"])
    entered = float(re.search(r"rank 0 enters barrier\(\) at ([0-9.]+)", job.stdout).group(1))
    assert ended - entered < 10, f"the job ended {ended - entered:.1f} s after the barrier"


@pytest.mark.parametrize("nranks,leaver", [(3, 2), (3, 0), (5, 4), (5, 1)])
def test_a_rank_that_skipped_a_call_and_left_ends_the_job(nranks, leaver):
    """Where the job's size is no power of two, a rank folded into the agreement's
    exchange (rank r >= p sends first) hears nothing from the ranks that wait for it:
    their stall notices (at half the stall warning, here 2 s) name them, and it ends the
    job instead of leaving them waiting. Also the other ranks, at 3 and 5."""
    job = mpiexec_job(
        nranks, SCRIPT, "skip_one", str(leaver), timeout=TIMEOUT_S, ML_COMM_STALL_WARN_SECONDS="4"
    )
    ended_with(
        job,
        40,
        [
            rf"rank {leaver} of {nranks} is leaving .* while rank \d+ waits for it in team 0's "
            rf"request 2 or later, which rank {leaver} never made"
        ],
    )


def test_a_folded_rank_that_skipped_a_call_and_waits_in_barrier_is_told():
    """The same folded rank enters barrier() instead: the stall notice, taken at the
    barrier's first look, still names the waiting rank at the looks that follow, and
    the barrier raises; its finalize then ends the job."""
    job = mpiexec_job(
        3, SCRIPT, "skip_one_barrier", "2", timeout=TIMEOUT_S, ML_COMM_STALL_WARN_SECONDS="4"
    )
    ended_with(
        job,
        40,
        [
            r"rank 2 barrier raised: rank 2 of 3 waits in barrier\(\) while rank \d+ waits for it "
            r"in team 0's request 2 or later",
            r"rank 2 of 3 is leaving .* which rank 2 never made",
        ],
    )


def test_custom_loop_with_different_step_counts_names_the_steps():
    job = mpiexec_job(2, SCRIPT, "custom_loop", timeout=TIMEOUT_S)
    ended_with(
        job,
        60,
        [
            r"Rank 1 ran 10 training steps .* different numbers of steps",
            r"rank 0 waits for it in team 0's request \d+ or later, which rank 1 never made \(its "
            r"last on team 0 was request \d+: (keyed group -?\d+: )?average of \d+ float32",
        ],
    )


def test_barrier_after_different_step_counts_names_the_steps():
    job = mpiexec_job(2, SCRIPT, "custom_loop_barrier", timeout=TIMEOUT_S)
    ended_with(
        job,
        60,
        [
            r"rank 1 of 2 waits in barrier\(\) while rank 0 waits for it in team 0's request",
            r"Rank 1 ran 10 training steps",
        ],
    )


def test_custom_loop_with_equal_steps_ends_well():
    job = mpiexec_job(2, SCRIPT, "equal_steps", timeout=TIMEOUT_S)
    assert job.returncode == 0, job.detail()
    assert "done rank 0" in job.stdout and "done rank 1" in job.stdout, job.detail()
    assert re.search(r"uneven data: ranks 0..1 have 6, 5 batches", job.stderr), job.detail()


def test_fit_with_different_step_counts_names_the_steps():
    job = mpiexec_job(2, SCRIPT, "fit_generator", timeout=TIMEOUT_S)
    ended_with(job, 60, [r"rank 1 ran 22 steps of epoch 1 |rank 0 has run 22 steps of epoch 1 "])
    assert "different numbers of steps" in job.output, job.detail()
    assert "pass every rank's fit the same steps_per_epoch" in job.output, job.detail()
    assert "rank 1 has run" not in job.output, f"the ended epoch said twice\n{job.detail()}"


LEFT = r"Rank 1's fit raised ValueError \(a callback of rank 1 failed\) after 3 steps of epoch 1"


def test_fit_that_raised_on_one_rank_and_went_on_is_named():
    """Rank 1's callback raises in fit's third step, and its program catches it and
    finalizes while rank 0 is still in the epoch: the message that ends the job says so,
    not only that the ranks ran different numbers of steps."""
    job = mpiexec_job(2, SCRIPT, "fit_callback_raises", timeout=TIMEOUT_S)
    ended_with(
        job,
        60,
        [
            r"rank 1 fit 1 raised ValueError: a callback of rank 1 failed",
            r"rank 1 of 2 is leaving .*" + LEFT,
        ],
    )


def test_fit_again_after_one_rank_raised_names_it():
    """The same, but rank 1 calls fit again: its new fit's agreement meets rank 0's
    fourth step, and both fail there (realigned, the job can end well); rank 1's error
    says its earlier fit left the epoch, rank 0's that a rank may have left it early."""
    ended_well_saying(
        "fit_again_after_raise",
        r"rank 0 fit 1 raised MismatchError: .*or one left the epoch early",
        r"rank 1 fit 2 raised MismatchError: .*" + LEFT,
    )


def ended_well_saying(mode: str, *patterns: str) -> None:
    """The job of `mode` ends, its output holds every pattern, and no process is left."""
    job = mpiexec_job(2, SCRIPT, mode, timeout=TIMEOUT_S)
    assert job.returncode is not None, f"the job hung\n{job.detail()}"
    for pattern in patterns:
        assert re.search(pattern, job.output), f"output lacks {pattern!r}\n{job.detail()}"
    assert not wait_gone(job.token), f"processes left behind\n{job.detail()}"


def test_evaluate_after_one_rank_raised_names_it():
    """The same, but rank 1 calls evaluate: its calls meet rank 0's fourth step, and its
    evaluate's error says that its fit left the epoch."""
    ended_well_saying(
        "evaluate_after_raise",
        r"rank 0 fit 1 raised MismatchError: .*or one left the epoch early",
        r"rank 1 evaluate raised MismatchError: .*" + LEFT,
    )


def test_evaluate_on_one_rank_alone_says_so():
    """Rank 0 alone evaluates between two fits: its evaluate meets rank 1's next fit, both
    fail, and rank 0's error says that evaluate is a call of every rank."""
    ended_well_saying(
        "evaluate_on_rank_0",
        r"rank 0 evaluate raised MismatchError: .*This rank was in evaluate, which every rank "
        r"must call",
        r"rank 1 fit raised MismatchError: .*This rank was starting fit",
    )


def test_barrier_that_raised_leaves_no_message_behind():
    """Rank 1's barrier raises (rank 0 waits in a reduction rank 1 has not made). Its
    send was delivered already (MPI cannot take it back), so its next barrier() resumes
    it: otherwise a later barrier lets a rank out before the others entered it, and
    finalize finds a barrier message never received and aborts the job."""
    job = mpiexec_job(2, SCRIPT, "barrier_after_raise", timeout=TIMEOUT_S)
    assert job.returncode == 0, job.detail()
    assert "rank 1 barrier raised: " in job.stdout, job.detail()
    assert "rank 0: barriers a rank left early: []" in job.stdout, job.detail()
    assert "done rank 0" in job.stdout and "done rank 1" in job.stdout, job.detail()
