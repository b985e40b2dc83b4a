"""Steps that cannot pair off: a rank that raises in a step, or skips a call, is found at its
next call on every rank, and no call returns an average of other calls' arrays.

With steps marked (`mc.step(i)`), a rank that leaves a step early (an exception it catches)
makes the other ranks raise at that step, naming it and how far ahead it is, and the steps
after are exact on every rank: the ranks realign. Without marks, a call that raised on one
rank before it reached the others (an argument only that rank found wrong) is found at the
next call, the same way. Two threads that share a team raise instead of mixing their calls.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from mpi_helpers import Checks, expected_average, make_input

import ml_comm as mc
from ml_comm.arrays import collectives


class Boom(Exception):
    """The exception a rank raises in its own code, outside ml_comm."""


@pytest.fixture
def pair(session):
    if session.nranks < 2:
        pytest.skip("ranks that differ need at least 2 ranks (this run has 1)")
    return session


SHAPES = [(3, 4), (50,)]  # a step's two calls: equal layouts, so only their place tells them apart
STEPS = 6


def two_call_step(session, i: int, c: Checks, fail_at: tuple[int, int] | None, errors: list):
    """Step i: two gradients calls of equal layout (a head and a body); this rank raises
    Boom before call fail_at[1] of step fail_at[0] (0: before its first submit)."""
    results = []
    try:
        with mc.step(i):
            for call in range(2):
                if fail_at == (i, call):
                    raise Boom(f"step {i} call {call}")
                grads = [make_input(session.rank, s, np.float32, 10 * i + call) for s in SHAPES]
                results.append(mc.gradients(grads))
    except Boom:
        errors.append(("boom", i, ""))
    except mc.MLCommError as e:
        errors.append(("mlcomm", i, str(e)))
    for call, out in enumerate(results):
        for k, s in enumerate(SHAPES):
            want = expected_average(s, np.float32, session.nranks, 10 * i + call)
            c.equal(out[k], want, f"step {i} call {call} tensor {k}")


@pytest.mark.parametrize("call", [0, 1], ids=["before-first-submit", "between-calls"])
def test_a_rank_that_leaves_a_step_makes_every_rank_raise_and_the_next_steps_are_exact(pair, call):
    c = Checks()
    last = pair.nranks - 1
    errors: list = []
    for i in range(1, STEPS + 1):
        two_call_step(pair, i, c, (3, call) if pair.rank == last else None, errors)
    if pair.rank == last:
        c.true(errors == [("boom", 3, "")], f"rank {last}: {errors}")
    else:
        c.true(len(errors) == 1 and errors[0][:2] == ("mlcomm", 3), f"errors: {errors}")
        text = errors[0][2] if errors else ""
        want = f"rank {last} is at step 4, call 0 on this team, this rank at step 3, call {call}"
        c.true(want in text and "(1 step behind)" in text, f"message: {text!r}")
    c.finish()


def test_a_rank_steps_behind_is_told_how_far(pair):
    """Rank n-1 skips steps 2 and 3 entirely: the others fail those steps, each naming how
    far rank n-1 is ahead, then step 4 on is exact."""
    c = Checks()
    last = pair.nranks - 1
    errors: list = []
    for i in range(1, STEPS + 1):
        if pair.rank == last and i in (2, 3):
            continue
        two_call_step(pair, i, c, None, errors)
    if pair.rank != last:
        steps = [e[1] for e in errors]
        c.true(steps == [2, 3], f"failed steps {steps}, want [2, 3]: {errors}")
        c.true(len(errors) == 2 and "(2 steps behind)" in errors[0][2], f"{errors}")
        c.true(len(errors) == 2 and "(1 step behind)" in errors[1][2], f"{errors}")
    else:
        c.true(errors == [], f"rank {last}: {errors}")
    c.finish()


def test_one_array_calls_sign_with_the_step_they_are_in(pair):
    """One-array calls (one C call each, which keeps the thread's identity where it reads
    it fast) after unmarked ones: rank n-1 makes its third call in step 4, ahead of the
    others; they fail their step 3 naming where rank n-1 is, rank n-1 fails its second
    call of step 4, and every other call pairs with the call of its step and is exact.
    Calls signed with an identity that did not follow the steps would all pair silently."""
    c = Checks()
    last = pair.nranks - 1
    errors = []
    for k in range(3):  # unmarked calls first: the identity the steps then change
        x = make_input(pair.rank, (5,), np.float32, k)
        c.equal(
            mc.gradients([x])[0], expected_average((5,), np.float32, pair.nranks, k), f"call {k}"
        )
    for i in range(1, STEPS + 1):
        step = 4 if (pair.rank == last and i == 3) else i
        x = make_input(pair.rank, (5,), np.float32, 10 * step)
        try:
            with mc.step(step):
                out = mc.gradients([x])[0]
            c.equal(out, expected_average((5,), np.float32, pair.nranks, 10 * step), f"step {step}")
        except mc.MLCommError as e:
            errors.append((i, str(e)))
    c.true([e[0] for e in errors] == ([4] if pair.rank == last else [3]), f"{errors}")
    if pair.rank != last:
        text = errors[0][1] if errors else ""
        c.true(f"rank {last} is at step 4" in text and "(1 step behind)" in text, f"{text!r}")
    c.finish()


class Interrupted(BaseException):
    """What a KeyboardInterrupt is to a call: no Exception, so the call is not told."""


def interrupted(*args, **kwargs):
    raise Interrupted  # as Ctrl-C would, while the call reads its input


@pytest.mark.parametrize("call", ["average", "allgather", "interrupted"])
def test_unmarked_a_call_that_raised_on_one_rank(pair, call, monkeypatch):
    """No steps marked: rank n-1's call fails before it reaches the others; the calls
    after are exact. For an argument only it has wrong, the others' average or allgather
    fails at once, told why (mlc_team_refuse_call); an interruption (no Exception) is not
    told, and the others' call fails once rank n-1's next call shows it ahead."""
    c = Checks()
    last = pair.nranks - 1
    seen = []
    for k in range(4):
        x = make_input(pair.rank, (5,), np.float32, k)
        wrong = pair.rank == last and k == 1
        arg = np.array(["x"]) if wrong and call != "interrupted" else x  # strings: refused
        if wrong and call == "interrupted":
            monkeypatch.setattr(collectives, "_input", interrupted)
        try:
            if call == "average":
                out = mc.average(arg.copy())
                want = expected_average((5,), np.float32, pair.nranks, k)
            else:
                out = mc.allgather(arg)
                want = np.concatenate(
                    [make_input(r, (5,), np.float32, k) for r in range(pair.nranks)]
                )
            c.equal(out, want, f"call {k}")
        except (TypeError, ValueError, mc.MLCommError, Interrupted) as e:
            seen.append((k, type(e).__name__, str(e)))
        monkeypatch.undo()
    c.true([s[0] for s in seen] == [1], f"rank {pair.rank}: {seen}")
    if pair.rank != last:
        text = seen[0][2] if seen else ""
        if call == "interrupted":
            c.true(f"rank {last} is at call" in text and "(1 call behind)" in text, f"{text!r}")
        else:
            want = f"rank {last}: an argument has a dtype the call does not take"
            name = "allreduce" if call == "average" else "allgather"
            c.true(want in text and f"invalid {name} arguments" in text, f"{text!r}")
    c.finish()


def test_two_threads_on_one_team_raise_and_never_mix(session):
    """Two threads average on team 0 at the same time, on every rank: a call either raises
    or returns its own thread's exact average, never a mix of the two threads' arrays."""
    c = Checks()
    rounds = 8
    wrong, raised = [], []
    start = threading.Barrier(2)

    def work(seed: int) -> None:
        for k in range(rounds):
            x = make_input(session.rank, (7,), np.float32, seed + k)
            start.wait()
            try:
                out = mc.average(x)
            except mc.MLCommError as e:
                raised.append(str(e))
                continue
            want = expected_average((7,), np.float32, session.nranks, seed + k)
            if out.tobytes() != want.tobytes():
                wrong.append((seed, k, out.tolist(), want.tolist()))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One more call from this thread: a call that waits for a partner the other rank's
    # threads never made realigns with it.
    x = make_input(session.rank, (3,), np.float32, 7)
    c.equal(mc.average(x), expected_average((3,), np.float32, session.nranks, 7), "after")
    c.true(not wrong, f"mixed results: {wrong[:3]}")
    # One rank's calls end too quickly to overlap reliably (and have nothing to mix).
    c.true(len(raised) >= 1 or session.nranks == 1, "no call raised: the threads never overlapped")
    named = ("in use by thread", "called from thread", " at call ")
    unnamed = [m for m in raised if not any(words in m for words in named)]
    c.true(not unnamed, f"messages that name no clash of threads: {unnamed}")
    c.finish()


def test_steps_do_not_nest_and_take_positive_numbers(session):
    c = Checks()
    with mc.step(5):
        c.raises(mc.StateError, lambda: mc.step(6).__enter__(), words=("do not nest",))
    c.raises(mc.BadArgumentError, lambda: mc.step(0).__enter__(), words=(">= 1",))
    with mc.step() as number:  # the previous + 1
        c.true(number == 6, f"step() after step(5) is {number}")
    c.finish()


@pytest.mark.parametrize("call", ["gradients", "average"])
def test_a_renamed_thread_signs_with_its_new_name(pair, call):
    """The one-array calls (one C call each) read the thread's identity without a call; a
    thread renamed between calls signs with its new name: renamed on one rank only, the
    call raises on every rank naming both threads; renamed back, the next is exact."""
    c = Checks()
    last = pair.nranks - 1
    me = threading.current_thread()
    own = me.name

    def reduce(seed: int) -> np.ndarray:
        x = make_input(pair.rank, (5,), np.float32, seed)
        return mc.gradients([x])[0] if call == "gradients" else mc.average(x)

    c.equal(reduce(1), expected_average((5,), np.float32, pair.nranks, 1), "before")
    if pair.rank == last:
        me.name = "renamed-here"
    try:
        e = c.raises(mc.MismatchError, lambda: reduce(2), words=("'renamed-here'",))
        c.true(f"thread '{own}'" in str(e), f"the other threads' name is not in {e}")
    finally:
        me.name = own
    c.equal(reduce(3), expected_average((5,), np.float32, pair.nranks, 3), "after")
    c.finish()
