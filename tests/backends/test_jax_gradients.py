"""ml_comm.gradients on JAX arrays (framework="jax"): eagerly, inside jax.jit through the
XLA FFI handler, and through the io_callback fallback, at 1-3 ranks, exactly (small
integers: every average is exact in float32). Runs where JAX is installed."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import WEIGHTS_CHECK_OFF, Checks, comm_world, init_settings

import ml_comm as mc

jax = pytest.importorskip("jax")
jnp = jax.numpy
pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def session():
    comm_world().barrier()
    # These tests average arrays that are no model's gradients: the check that a job
    # shares its weights is off (test_jax_weights_check.py tests it).
    with init_settings(WEIGHTS_CHECK_OFF):
        mc.init(2, 1, 1024, "jax")
    yield mc.get_rank(), mc.get_nranks()
    mc.finalize()


def inputs(rank: int) -> list:
    """Two dtypes (two requests of the core), a weight and a vector, and a None."""
    return [
        jnp.arange(12, dtype=jnp.float32).reshape(3, 4) * (rank + 1),
        None,
        jnp.full((5,), 2 * rank, jnp.int32),
        jnp.arange(7, dtype=jnp.float32) - rank,
    ]


def expected(nranks: int) -> list:
    mean = (nranks + 1) / 2
    return [
        np.arange(12, dtype=np.float32).reshape(3, 4) * mean,
        None,
        np.full(5, nranks - 1, np.int32),  # the integer average of 0, 2, 4, ...
        np.arange(7, dtype=np.float32) - (nranks - 1) / 2,
    ]


def check_all(checks: Checks, got: list, want: list, what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            checks.true(g is None, f"{what}[{i}]: {g}, want None")
        else:
            checks.equal(np.asarray(g), w, f"{what}[{i}]")


def test_eager_jit_and_fallback_agree_exactly(session):
    from ml_comm import jax as binding
    from ml_comm.api import session as running_session

    rank, nranks = session
    checks = Checks()
    want = expected(nranks)
    check_all(checks, mc.gradients(inputs(rank)), want, "eager")
    check_all(checks, jax.jit(lambda g: mc.gradients(g))(inputs(rank)), want, "jit")
    host = running_session().backend.host
    fallback = jax.jit(lambda g: binding.average(g, None, lambda a: host.gradients(a, 0)))
    check_all(checks, fallback(inputs(rank)), want, "io_callback")
    checks.finish()


def test_the_handler_is_the_one_in_use(session):
    from ml_comm.api import session as running_session
    from ml_comm.jax import handler

    checks = Checks()
    checks.true(handler.load(), f"the FFI handler did not load: {handler._unavailable}")
    checks.true(
        running_session().backend.team_ids is not None, "the backend runs without the handler"
    )
    checks.finish()


def test_lists_that_differ_fail_on_every_rank(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    step = jax.jit(lambda g: mc.gradients(g))
    error = checks.raises(
        Exception,
        lambda: jax.block_until_ready(step([jnp.ones((2 + rank, 3), jnp.float32)])),
        words=("ml_comm (status 7, ranks disagree on the request): gradients failed",),
    )
    checks.true("rank 1 submitted 1 tensor, 9 float32" in str(error), f"no rank 1 in {error}")
    check_all(checks, step(inputs(rank)), expected(nranks), "the next call")
    checks.finish()


@pytest.mark.parametrize("how", ["eager", "jit", "io_callback"])
def test_a_list_of_only_none_is_a_call(session, how):
    """On one rank a list of only None against gradients elsewhere fails on every rank
    (instead of the others pairing their gradients with that rank's next call); on every
    rank it gives Nones back."""
    from ml_comm import jax as binding
    from ml_comm.api import session as running_session

    rank, nranks = session
    host = running_session().backend.host
    step = {
        "eager": lambda g: mc.gradients(g),
        "jit": jax.jit(lambda g: mc.gradients(g)),
        "io_callback": jax.jit(lambda g: binding.average(g, None, lambda a: host.gradients(a, 0))),
    }[how]
    checks = Checks()
    if nranks > 1:
        last = nranks - 1
        grads = [None, None] if rank == last else [jnp.ones((2, 3), jnp.float32), None]
        error = checks.raises(
            Exception,
            lambda: jax.block_until_ready(step(grads)),
            words=("ranks disagree",),
        )
        wanted = f"rank {last} submitted no tensors (a list that was empty or held only None)"
        checks.true(wanted in str(error), f"{wanted!r} not in {error}")
    checks.true(step([None, None]) == [None, None], "a list of only None on every rank")
    check_all(checks, step(inputs(rank)), expected(nranks), "the next call")
    checks.finish()


@pytest.fixture(params=["eager", "jit", "io_callback"])
def how(request):
    """How the session's gradients run: io_callback is jit through the fallback that the
    backend takes where the FFI handler cannot be built."""
    from ml_comm.api import session as running_session

    backend = running_session().backend
    ids = backend.team_ids
    if request.param == "io_callback":
        backend.team_ids = None
    yield request.param
    backend.team_ids = ids


@pytest.mark.parametrize(
    "bad, local, told",
    [
        ("string", "is not an array", "tensor 1 of its list is not an array"),
        ("bool", "cannot reduce dtype bool", "tensor 1 of its list has a dtype the call does not"),
        ("dict", "takes a list of JAX arrays", "an argument is of a type the call does not take"),
    ],
)
def test_an_argument_only_one_rank_finds_wrong(session, how, bad, local, told):
    """That rank raises its own error before it makes the custom call, eagerly or while
    tracing, through the custom call or the fallback; the others' call fails at once
    naming it, instead of waiting for a call that rank never makes or pairing with its
    next; the next call is exact on every rank."""
    rank, nranks = session
    if nranks < 2:
        pytest.skip("one rank has no other rank to tell")
    # The wrong list is made inside the step, as a train step would.
    wrong = {
        "string": lambda g: [g[0], "abc"],
        "bool": lambda g: [g[0], g[1] > 0],
        "dict": lambda g: {"w": g[0]},
    }[bad]
    if how == "eager":
        step, bad_step = mc.gradients, lambda g: mc.gradients(wrong(g))
    else:
        # New functions: jit's cache would give back a step traced for the other path.
        step, bad_step = (
            jax.jit(lambda g: mc.gradients(g)),
            jax.jit(lambda g: mc.gradients(wrong(g))),
        )
    checks = Checks()
    last = nranks - 1
    good = [jnp.ones((4,), jnp.float32), jnp.ones((3,), jnp.float32)]
    if rank == last:
        checks.raises(mc.BadArgumentTypeError, lambda: bad_step(good), words=(local,))
    else:
        error = checks.raises(
            Exception, lambda: jax.block_until_ready(step(good)), words=(f"rank {last}: {told}",)
        )
        checks.true("No rank moved any data" in str(error), str(error))
    check_all(checks, step(inputs(rank)), expected(nranks), "the next call")
    checks.finish()


def worked(x, rounds: int):
    """x after `rounds` products with the identity: a step's worth of work before its
    gradients exist, so that the step's average runs well after it was dispatched."""
    w = jnp.eye(x.shape[0], dtype=x.dtype)
    for _ in range(rounds):
        x = x @ w
    return x


def test_a_refusal_comes_after_the_steps_dispatched_before(session):
    """JAX runs a jitted step asynchronously: the last rank dispatches one whose custom
    call waits for a long computation, then makes a call it refuses. The refusal must
    reach the others after that step's request: their step is exact, and their next call
    is the one that fails, naming the refusal."""
    rank, nranks = session
    if nranks < 2:
        pytest.skip("one rank has no other rank to tell")

    @jax.jit
    def step(x):
        return mc.gradients([worked(x, 200)])[0]

    x = jnp.full((256, 256), float(rank), jnp.float32)
    want = np.full((256, 256), (nranks - 1) / 2, np.float32)
    checks = Checks()
    check_all(checks, [step(x)], [want], "the compiled step")  # compiled once everywhere
    last = nranks - 1
    if rank == last:
        out = step(x)  # dispatched: still running when the next call is refused
        checks.raises(
            mc.BadArgumentTypeError, lambda: mc.gradients([x, "abc"]), words=("not an array",)
        )
        check_all(checks, [out], [want], "the step dispatched before the refusal")
    else:
        check_all(checks, [step(x)], [want], "the step")
        told = f"rank {last}: tensor 1 of its list is not an array"
        error = checks.raises(Exception, lambda: mc.gradients([x, x]), words=(told,))
        checks.true(error is None or "No rank moved any data" in str(error), str(error))
    checks.finish()


@pytest.mark.parametrize("how", ["jit", "io_callback"], indirect=True)
def test_an_api_call_comes_after_the_steps_dispatched_before(session, how):
    """Every rank dispatches a jitted step whose average waits for a long computation,
    then averages a NumPy array; the last rank gets to that call only after its step's
    average would have run. Every rank's API call waits for the steps it dispatched, so
    each step pairs with the others' step and each call with the others' call, exactly,
    trial after trial (without the wait, the last rank's step met the others' call)."""
    import time

    rank, nranks = session
    if nranks < 2:
        pytest.skip("one rank calls in another order than no other rank")

    @jax.jit
    def step(x):
        x = worked(x, 100)
        return mc.gradients([x, x[0]])  # two arrays: the fallback's general path

    checks = Checks()
    mean = (nranks - 1) / 2
    for trial in range(3):
        x = jnp.full((128, 128), float(rank + trial), jnp.float32)
        out = step(x)  # dispatched
        if rank == nranks - 1:
            time.sleep(0.5)  # its step's average is due before its API call
        total = mc.allreduce_sum(np.full(3, rank + 10 * trial, np.int64))
        checks.equal(total, np.full(3, nranks * mean + 10 * trial * nranks, np.int64), "sum")
        want = [
            np.full((128, 128), mean + trial, np.float32),
            np.full(128, mean + trial, np.float32),
        ]
        check_all(checks, out, want, f"step {trial}")
    checks.finish()


def test_broadcast_of_a_none_on_one_rank(session):
    """Told to the others' broadcast, which fails naming that rank; the next is exact."""
    rank, nranks = session
    if nranks < 2:
        pytest.skip("one rank has no other rank to tell")
    checks = Checks()
    last = nranks - 1
    values = [jnp.full((3,), rank, jnp.float32), jnp.arange(4)]
    if rank == last:
        checks.raises(mc.BadArgumentError, lambda: mc.broadcast(values[:1] + [None]))
    else:
        told = f"rank {last}: tensor 1 of its list is None, not an array"
        checks.raises(mc.BadArgumentError, lambda: mc.broadcast(values), words=(told,))
    got = mc.broadcast(values, 0)
    check_all(checks, got, [np.zeros(3, np.float32), np.arange(4, dtype=np.int32)], "after")
    checks.finish()


def test_broadcast_of_a_list_and_of_one_array(session):
    """Root's values from every root, as new JAX arrays: a list for a list, one array for
    one array (not the rows of it), of the input's dtype and shape."""
    rank, nranks = session
    checks = Checks()
    for root in range(nranks):
        got = mc.broadcast([jnp.full((3, 2), rank, jnp.float32), jnp.arange(4) + rank], root)
        checks.true(type(got) is list and len(got) == 2, f"root {root}: {type(got).__name__}")
        want = [np.full((3, 2), root, np.float32), np.arange(4, dtype=np.int32) + root]
        check_all(checks, got, want, "list")
        one = mc.broadcast(jnp.full((5, 2), rank, jnp.int32), root)
        checks.true(isinstance(one, jax.Array), f"root {root}: one array gave {type(one)}")
        checks.equal(np.asarray(one), np.full((5, 2), root, np.int32), f"root {root}: one array")
        scalar = mc.broadcast(jnp.float32(rank), root)
        checks.equal(np.asarray(scalar), np.float32(root), f"root {root}: 0-d array")
    checks.raises(mc.BadArgumentTypeError, lambda: mc.broadcast(3.0, 0), words=("float",))
    checks.finish()
