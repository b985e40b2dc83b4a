"""mc.gradients: a new list averaged over ranks, exact for every dtype and size."""

from __future__ import annotations

import numpy as np
import pytest
from ml_comm._core import lib
from mpi_helpers import DTYPE_IDS, DTYPES, MSGLEN, SIZE_SPECS, Checks, expected_average, make_input

import ml_comm as mc
from ml_comm import api
from ml_comm.arrays import _numpy_glue
from ml_comm.arrays import pool as _pool

pytestmark = pytest.mark.mpi

# Far above every sync point the suite reaches: the team stays synchronous.
ALWAYS_SYNC = 1_000_000


def check_gradients(c: Checks, session, specs, team=0, tag=""):
    """specs: list of (shape, dtype, seed). Runs one mc.gradients call and checks
    the result element by element, the inputs, and cross-rank identity."""
    grads = [make_input(session.rank, shape, dt, seed) for shape, dt, seed in specs]
    before = [g.copy() for g in grads]
    out = mc.gradients(grads, team=team)
    c.true(isinstance(out, list), f"{tag} gradients returned {type(out).__name__}, want list")
    out = list(out)
    c.true(len(out) == len(grads), f"{tag} {len(out)} results for {len(grads)} gradients")
    for i, ((shape, dt, seed), g, b, o) in enumerate(zip(specs, grads, before, out)):
        what = f"{tag} gradient {i} ({np.dtype(dt).name}{tuple(np.shape(g))})"
        c.equal(o, expected_average(shape, dt, session.nranks, seed), what)
        c.equal(g, b, f"{what} input was modified")
        if isinstance(o, np.ndarray):
            c.true(o is not g, f"{what}: result is the input object")
            c.true(o.size == 0 or not np.shares_memory(o, g), f"{what}: result shares input memory")
    c.same_on_all_ranks(out, f"{tag} results")
    return out


@pytest.mark.parametrize("size", list(SIZE_SPECS), ids=[f"size={s}" for s in SIZE_SPECS])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_single_array(session, dtype, size):
    c = Checks()
    count = SIZE_SPECS[size](session.nranks)
    check_gradients(c, session, [((count,), dtype, 0)])
    c.finish()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_list_of_one_dtype_larger_than_msglen(session, dtype):
    """Many arrays of one dtype adding up to ~3x msglen: streamed through the
    fusion buffer; each keeps its own place in the list."""
    c = Checks()
    n = session.nranks
    shapes = [(1001,), (7,), (), (0,), (n + 1,), (33, 31), (2, 3, 5), (MSGLEN - 3,), (1,), (4096,)]
    specs = [(s, dtype, i) for i, s in enumerate(shapes)]
    assert sum(int(np.prod(s)) for s in shapes) > 2 * MSGLEN
    check_gradients(c, session, specs)
    c.finish()


def test_mixed_dtypes_and_shapes(session):
    """One list mixing every dtype, 0-d arrays, empty arrays and multi-dim shapes."""
    c = Checks()
    n = session.nranks
    shapes = [(), (0,), (3, 4), (n,), (2, 0, 3), (1001,), (7, 1), (), (n - 1,), (257,)]
    specs = []
    for i in range(len(DTYPES) * 3):
        specs.append((shapes[i % len(shapes)], DTYPES[(i * 5) % len(DTYPES)], i))
    out = check_gradients(c, session, specs, tag="mixed")
    c.true(mc.check_buffers_match(out) == 0, "check_buffers_match(results) != 0")
    c.finish()


def test_mixed_list_larger_than_msglen(session):
    c = Checks()
    specs = [((1500 + 17 * i,), DTYPES[i % len(DTYPES)], i) for i in range(12)]
    assert sum(s[0][0] for s in specs) > 4 * MSGLEN
    check_gradients(c, session, specs, tag="mixed>msglen")
    c.finish()


def test_large_array_many_segments(session):
    """200003 float32 = ~3125 segments of 256 bytes, ~49x msglen."""
    c = Checks()
    check_gradients(c, session, [((200_003,), np.float32, 3)], tag="large f32")
    check_gradients(c, session, [((50_001,), np.float64, 4)], tag="large f64")
    c.finish()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_zero_dim(session, dtype):
    """0-d arrays keep shape (): alone, two of them, and amid 1-d arrays."""
    c = Checks()
    check_gradients(c, session, [((), dtype, 1)], tag="alone")
    check_gradients(c, session, [((), dtype, 2), ((), dtype, 3)], tag="pair")
    check_gradients(c, session, [((5,), dtype, 4), ((), dtype, 5), ((0,), dtype, 6)], tag="amid")
    c.finish()


def test_empty_list(session):
    c = Checks()
    out = mc.gradients([])
    c.true(list(out) == [], f"gradients([]) returned {out!r}")
    c.finish()


def test_second_team(session):
    c = Checks()
    specs = [((1001,), np.float32, 1), ((3,), np.int64, 2), ((), np.float16, 3)]
    check_gradients(c, session, specs, team=1, tag="team 1")
    check_gradients(c, session, specs, team=0, tag="team 0")
    c.finish()


def test_repeated_calls_exact(session):
    """Calls after the first still give the exact averages: nothing of a call is left
    behind for the next (the same bits again on inputs whose sum depends on the order of
    the additions: test_determinism.py)."""
    c = Checks()
    specs = [((4099,), np.float32, 5), ((65,), DTYPES[3], 6), ((9,), np.int32, 7)]
    for k in range(1, 5):
        check_gradients(c, session, specs, tag=f"call {k}")
    c.finish()


@pytest.mark.parametrize(
    "alg",
    ["ALG_RING", "ALG_RECURSIVE_DOUBLING", "ALG_RABENSEIFNER", "ALG_AUTO"],
)
def test_algorithms_exact(session, alg):
    """Each algorithm chosen through config_team gives the exact average."""
    c = Checks()
    n = session.nranks
    specs = [
        ((count,), dt, i)
        for i, (count, dt) in enumerate(
            [
                (0, np.float32),
                (1, np.float64),
                (n - 1, np.float16),
                (n, np.int32),
                (n + 1, np.int64),
                (7, DTYPES[3]),
                (1001, np.float32),
                (20011, np.float64),
            ]
        )
    ]
    try:
        mc.config_team(0, getattr(mc, alg), ALWAYS_SYNC, ALWAYS_SYNC)
        for shape, dt, seed in specs:  # one dtype per call: each its own schedule
            check_gradients(c, session, [(shape, dt, seed)], tag=alg)
        check_gradients(c, session, specs, tag=f"{alg} fused")
    finally:
        mc.config_team(0, mc.ALG_AUTO, ALWAYS_SYNC, ALWAYS_SYNC)
    c.finish()


def test_many_calls_varied_sizes(session):
    """100 calls with sizes, dtypes and list lengths drawn from a seeded generator
    (the same seed on every rank, so every rank makes the same calls): catches
    segment / fusion-buffer bookkeeping that leaks from one call into the next."""
    c = Checks()
    rng = np.random.default_rng(20240613)
    for call in range(100):
        nitems = int(rng.integers(1, 5))
        specs = []
        for k in range(nitems):
            count = int(rng.choice([0, 1, 2, 5, 63, 64, 65, 127, 500, 2047, 4097, 9000]))
            specs.append(((count,), DTYPES[int(rng.integers(len(DTYPES)))], call * 10 + k))
        check_gradients(c, session, specs, team=call % 2, tag=f"call {call}")
    c.finish()


def test_same_array_twice_in_list(session):
    c = Checks()
    g = make_input(session.rank, (130,), np.float32, 8)
    out = mc.gradients([g, g, g[:7]])
    want = expected_average((130,), np.float32, session.nranks, 8)
    c.equal(out[0], want, "first occurrence")
    c.equal(out[1], want, "second occurrence")
    c.equal(out[2], want[:7], "prefix view")
    c.true(out[0] is not out[1], "the two results are one object")
    c.finish()


def test_fortran_order_and_strided_inputs(session):
    """gradients copies its inputs, so any layout is accepted; results keep shapes."""
    c = Checks()
    base = make_input(session.rank, (6, 10), np.float64, 9)
    want = expected_average((6, 10), np.float64, session.nranks, 9)
    out = mc.gradients([np.asfortranarray(base), base[:, ::3], base.T])
    c.equal(np.ascontiguousarray(out[0]), want, "Fortran-ordered")
    c.equal(np.ascontiguousarray(out[1]), np.ascontiguousarray(want[:, ::3]), "strided")
    c.equal(np.ascontiguousarray(out[2]), np.ascontiguousarray(want.T), "transposed")
    c.finish()


@pytest.mark.parametrize("verbosity", [1, 2])
def test_periodic_report(session, capsys, verbosity):
    """verbosity=2: every rank reports every perf_freq calls; verbosity=1: rank 0 only.
    Results stay exact while reporting."""
    c = Checks()
    specs = [((300,), np.float32, 1), ((3,), np.int32, 2)]
    try:
        mc.config_team(1, mc.ALG_AUTO, ALWAYS_SYNC, ALWAYS_SYNC, verbosity=verbosity, perf_freq=3)
        for _ in range(6):
            check_gradients(c, session, specs, team=1, tag=f"verbosity={verbosity}")
    finally:
        mc.config_team(1, mc.ALG_AUTO, ALWAYS_SYNC, ALWAYS_SYNC)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "team 1" in ln]
    speaks = verbosity == 2 or session.rank == 0
    c.true(
        (len(lines) >= 2) if speaks else not lines,
        f"verbosity={verbosity}: {len(lines)} report lines for team 1: {lines}",
    )
    mine = f"Rank {session.rank} "
    c.true(all(mine in ln for ln in lines), f"report lines name another rank: {lines}")
    c.finish()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_numpy_scalars(session, dtype):
    """NumPy scalars (np.float32(x), a Keras optimizer's iterations.numpy()) are
    averaged like 0-d arrays and come back as NumPy scalars of their dtype."""
    c = Checks()
    for tag, seeds in (("alone", (1,)), ("pair", (2, 3))):
        grads = [make_input(session.rank, (), dtype, seed)[()] for seed in seeds]
        out = mc.gradients(grads)
        for seed, o in zip(seeds, out):
            want = expected_average((), dtype, session.nranks, seed)[()]
            c.true(type(o) is type(want), f"{tag}: got {type(o).__name__}, want {type(want)}")
            c.equal(np.asarray(o), np.asarray(want), f"{tag}: scalar seed {seed}")
    arrays = [make_input(session.rank, (5,), dtype, 4), make_input(session.rank, (), dtype, 5)[()]]
    out = mc.gradients(arrays, team=1)
    c.equal(out[0], expected_average((5,), dtype, session.nranks, 4), "amid: array")
    c.equal(np.asarray(out[1]), expected_average((), dtype, session.nranks, 5), "amid: scalar")
    c.finish()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_one_array_meets_the_list_path(session, dtype):
    """A one-array call takes a shortcut into the core when the array is C-contiguous;
    a rank whose array is a strided view takes the general path. Both must send the
    same request: the results are exact and the same on every rank."""
    c = Checks()
    count = 3 * session.nranks + 1
    g = make_input(session.rank, (count,), dtype, 7)
    mc.gradients([g.copy()])  # the first call makes the team's output pool
    if session.rank % 2:
        wide = np.zeros(2 * count, dtype)
        wide[::2] = g
        g = wide[::2]  # not contiguous: the general path
    out = mc.gradients([g])
    c.equal(out[0], expected_average((count,), dtype, session.nranks, 7), "one array")
    c.same_on_all_ranks(out, "one array")
    c.finish()


def unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose data starts one byte past an aligned address."""
    raw = np.zeros(a.nbytes + 1, np.uint8)
    out = np.frombuffer(raw.data, a.dtype, a.size, offset=1).reshape(a.shape)
    out[...] = a
    return out


class Subclass(np.ndarray):
    pass


SMALL_FORMS = {
    "plain": lambda g: g,
    "unaligned": unaligned,
    "subclass": lambda g: g.view(Subclass),
    "strided": lambda g: np.stack([g, g], axis=-1)[..., 0],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_one_array_forms_meet(session, dtype):
    """A one-array call runs in C (ml_comm/arrays/_numpy_glue.c) only for a plain, aligned,
    C-contiguous array; the other forms take the general path. Each rank passes
    another form, in turn: the requests agree and the results are exact everywhere,
    small ones (fresh arrays) and large ones (from the pool)."""
    c = Checks()
    forms = list(SMALL_FORMS)
    large = (_pool.MIN_BYTES // np.dtype(dtype).itemsize + 3,)
    for shift in range(len(forms)):
        form = forms[(session.rank + shift) % len(forms)]
        for shape in [(), (5,), (2, 3), large]:
            g = SMALL_FORMS[form](make_input(session.rank, shape, dtype, shift))
            before = g.copy()
            out = mc.gradients([g])
            want = expected_average(shape, dtype, session.nranks, shift)
            c.equal(out[0], want, f"{form} {shape}")
            c.true(type(out[0]) is np.ndarray, f"{form}: result is {type(out[0]).__name__}")
            c.equal(g, before, f"{form} {shape}: the input was modified")
            c.same_on_all_ranks(out, f"{form} {shape}")
    c.finish()


def test_c_path_takes_only_what_it_can_read(session):
    """The C path answers one plain array in a list, small and large, and hands everything
    else back (None); its large results come from the team's pool and go back to it. The
    in-place reductions' C path answers plain writeable arrays, in place."""
    c = Checks()
    mc.gradients([np.zeros(3, np.float32)])  # binds the team's short path
    backend = api.session().backend
    plain, bindings, pool = backend.plain, backend.bindings, backend.pools[0]
    me = backend.thread_state  # the thread's identity, as gradients signs

    def gradients(grads, team=0):
        return _numpy_glue.gradients(plain, grads, team, me)

    g = make_input(session.rank, (7,), np.float32, 1)
    out = gradients([g])
    c.true(type(out) is list and len(out) == 1, f"the C path gave {out!r}")
    c.equal(out[0], expected_average((7,), np.float32, session.nranks, 1), "plain float32")
    big = make_input(session.rank, (_pool.MIN_BYTES,), np.float32, 2)
    (out,) = gradients([big])
    c.equal(out, expected_average(big.shape, np.float32, session.nranks, 2), "from the pool")
    free = pool.free_blocks()
    view = out[10:20]
    del out
    c.true(pool.free_blocks() == free, "a view's block went back while the view lives")
    del view
    c.true(pool.free_blocks() == min(free + 1, _pool.KEEP), "the block did not go back")
    declined = {
        "unaligned": unaligned(g),
        "subclass": g.view(Subclass),
        "strided": np.stack([g, g], axis=-1)[..., 0],
        "byte-swapped": g.astype(">f4"),
        "object dtype": np.array([1, 2], object),
        "list": [1.0, 2.0],
    }
    for what, value in declined.items():
        c.true(gradients([value]) is None, f"{what} was not declined")
    lists = {"a tuple": (g,), "two arrays": [g, g], "no array": [], "a team unbound": None}
    for what, grads in lists.items():
        got = gradients([g], team=7) if grads is None else gradients(grads)
        c.true(got is None, f"{what} was not declined")
    x = make_input(session.rank, (3, 5), np.float32, 3)
    out = _numpy_glue.reduce_in_place(bindings, x, 0, lib.MLC_OP_AVERAGE, me)
    c.true(out is x, "in place: the array itself comes back")
    c.equal(x, expected_average((3, 5), np.float32, session.nranks, 3), "averaged in place")
    read_only = make_input(session.rank, (7,), np.float32, 1)
    read_only.flags.writeable = False
    declined["read-only"] = read_only
    for what, value in declined.items():
        got = _numpy_glue.reduce_in_place(bindings, value, 0, lib.MLC_OP_SUM, me)
        c.true(got is None, f"{what} was not declined in place")
    c.true(_numpy_glue.reduce_in_place(bindings, x, 7, lib.MLC_OP_SUM, me) is None, "team 7")
    c.finish()
