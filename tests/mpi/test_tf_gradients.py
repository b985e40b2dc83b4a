"""mc.gradients with framework="tensorflow": exact averages through the ops for every
dtype and size, in eager mode, inside tf.function and in a tf.compat.v1 graph; mixed
dtypes, None passthrough, IndexedSlices, unknown shapes, repeated graph execution."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import DTYPE_IDS, DTYPES, MSGLEN, Checks, average_of, expected_average, make_input
from tf_helpers import MODES, module_session_fixture, run_in_mode, tf_dtype, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()


def sizes(n: int) -> list[tuple]:
    """Shapes covering 0, 1, odd, around n, multi-dim, 0-d, and two larger than the
    fusion buffer (MSGLEN elements), the last spanning 128 (float32) to 256 (float64)
    segments of 256 bytes."""
    return [(0,), (1,), (7,), (n + 1,), (), (33, 31), (1001,), (MSGLEN + 1,), (2 * MSGLEN + 3,)]


def check_outputs(c: Checks, outs, specs, nranks, tag):
    """outs: NumPy results of one gradients call; specs: (shape, dtype, seed) or None."""
    c.true(len(outs) == len(specs), f"{tag}: {len(outs)} results for {len(specs)} gradients")
    for i, (o, spec) in enumerate(zip(outs, specs)):
        if spec is None:
            c.true(o is None, f"{tag} gradient {i}: None went in, got {type(o).__name__}")
            continue
        shape, dt, seed = spec
        what = f"{tag} gradient {i} ({np.dtype(dt).name}{shape})"
        c.equal(o, expected_average(shape, dt, nranks, seed), what)


def check_static_shapes(c: Checks, shape_log, tag):
    for ins, outs in shape_log:
        for i, (si, so) in enumerate(zip(ins, outs)):
            c.true(
                so is not None and so.as_list() == si.as_list(),
                f"{tag}: static shape of result {i} is {so}, want {si}",
            )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mode", MODES)
def test_every_size(tf_session, mode, dtype):
    """One gradients() call per size (each a one-tensor list), then all sizes fused in
    one call; graph modes run the graph twice with different inputs."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    shapes = sizes(n)
    k = len(shapes)

    def fn(tensors):
        singles = [mc.gradients([t])[0] for t in tensors[:k]]
        return singles + mc.gradients(tensors[k:])

    runs = []
    specs_per_run = []
    for run in range(2):
        specs = [(s, dtype, 10 * run + i) for i, s in enumerate(shapes)]
        specs += [(s, dtype, 10 * run + 100 + i) for i, s in enumerate(shapes)]
        specs_per_run.append(specs)
        runs.append([make_input(r, s, d, seed) for s, d, seed in specs])
    log = []
    results = run_in_mode(mode, fn, runs, shape_log=log)
    for run, (outs, specs) in enumerate(zip(results, specs_per_run)):
        check_outputs(c, outs, specs, n, f"{mode} run {run}")
        c.same_on_all_ranks(outs, f"{mode} run {run}")
    check_static_shapes(c, log, mode)
    c.finish()


@pytest.mark.parametrize("mode", ["function", "v1"])
def test_unknown_shapes(tf_session, mode):
    """Inputs of unknown static shape (the fused op inside a graph): still exact, and
    the results have the runtime shapes."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    specs = [
        ((n + 2, 3), np.float32, 1),
        ((0,), np.float32, 2),
        ((1001,), np.float64, 3),
        ((5,), np.int64, 4),
        ((), np.float16, 5),
        ((257,), DTYPES[3], 6),
        ((2 * MSGLEN + 3,), np.float32, 7),
    ]
    runs = [[make_input(r, s, d, seed) for s, d, seed in specs]] * 2
    results = run_in_mode(mode, mc.gradients, runs, static_shapes=False)
    for run, outs in enumerate(results):
        check_outputs(c, outs, specs, n, f"{mode} unknown shapes run {run}")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_mixed_dtypes_and_none(tf_session, mode):
    """One list mixing every dtype, 0-d and empty tensors, with None entries (in the
    first, middle and last place) passed through as None."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    shapes = [(), (0,), (3, 4), (n,), (2, 0, 3), (1001,), (7, 1), (), (n - 1,), (257,)]
    specs = [(shapes[i % len(shapes)], DTYPES[(i * 5) % len(DTYPES)], i) for i in range(18)]
    # None at positions 0, 7, 8 and last
    layout = [None] + specs[:6] + [None, None] + specs[6:] + [None]

    def fn(tensors):
        it = iter(tensors)
        return mc.gradients([None if s is None else next(it) for s in layout])

    arrays = [make_input(r, s, d, seed) for s, d, seed in specs]
    log = []
    for run, outs in enumerate(run_in_mode(mode, fn, [arrays, arrays], shape_log=log)):
        check_outputs(c, outs, layout, n, f"{mode} mixed run {run}")
        c.same_on_all_ranks([o for o in outs if o is not None], f"{mode} mixed run {run}")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_all_none_and_empty_list(tf_session, mode):
    c = Checks()
    if mode == "eager":
        c.true(mc.gradients([]) == [], "gradients([]) is not []")
        c.true(mc.gradients([None, None]) == [None, None], "gradients([None, None])")
    else:
        r = tf_session.rank
        x = make_input(r, (3,), np.float32, 1)
        outs = run_in_mode(mode, lambda t: mc.gradients([None]) + mc.gradients([]) + t, [[x]])[0]
        c.true(len(outs) == 2 and outs[0] is None, f"{mode}: got {outs!r}")
    c.finish()


def _gather_expected(n, rows, cols, nidx):
    dense = []
    for rank in range(n):
        idx, w = _gather_inputs(rank, rows, cols, nidx)
        d = np.zeros((rows, cols), np.float32)
        np.add.at(d, idx, w)
        dense.append(d)
    return average_of(np.stack(dense), np.float32, n)


def _gather_inputs(rank, rows, cols, nidx):
    # rank-dependent rows with repeats (duplicate indices are summed when densified)
    idx = (np.arange(nidx) * (rank + 2) + rank) % rows
    w = make_input(rank, (nidx, cols), np.float32, 3)
    return idx.astype(np.int64), w


@pytest.mark.parametrize("mode", MODES)
def test_indexed_slices(tf_session, mode):
    """The gradient of tf.gather on a variable is an IndexedSlices; it comes back as a
    dense tensor of the variable's shape holding the exact average, next to a dense
    gradient and an unconnected variable's None in the same call."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    rows, cols, nidx = 50, 3, 23
    idx, w = _gather_inputs(r, rows, cols, nidx)
    dense_in = make_input(r, (4, cols), np.float32, 4)
    kinds = []

    def grads_of(emb, other, unused):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, idx) * w) + tf.reduce_sum(other * dense_in)
        g = tape.gradient(loss, [emb, other, unused])
        kinds.append([type(x).__name__ for x in g])
        return mc.gradients(g)

    if mode == "v1":
        graph = tf.Graph()
        with graph.as_default():
            emb = tf.Variable(np.zeros((rows, cols), np.float32))
            other = tf.Variable(np.zeros((4, cols), np.float32))
            unused = tf.Variable(np.zeros((2,), np.float32))
            loss = tf.reduce_sum(tf.gather(emb, idx) * w) + tf.reduce_sum(other * dense_in)
            opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            gv = opt.compute_gradients(loss, [emb, other, unused])
            kinds.append([type(g).__name__ for g, _ in gv])
            outs = mc.gradients([g for g, _ in gv])
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(init)
            got = sess.run(outs[:2])
            outs = got + [outs[2]]
    else:
        emb = tf.Variable(np.zeros((rows, cols), np.float32))
        other = tf.Variable(np.zeros((4, cols), np.float32))
        unused = tf.Variable(np.zeros((2,), np.float32))
        fn = grads_of if mode == "eager" else tf.function(grads_of)
        outs = fn(emb, other, unused)
        c.true(all(isinstance(o, tf.Tensor) for o in outs[:2]), f"{mode}: results {outs!r}")
        outs = [to_numpy(o) for o in outs[:2]] + [outs[2]]
    c.true(
        bool(kinds) and kinds[0][0] == "IndexedSlices" and kinds[0][2] == "NoneType",
        f"{mode}: the test did not produce the gradient types it checks: {kinds}",
    )
    c.equal(outs[0], _gather_expected(n, rows, cols, nidx), f"{mode} IndexedSlices result")
    c.equal(outs[1], expected_average((4, cols), np.float32, n, 4), f"{mode} dense result")
    c.true(outs[2] is None, f"{mode}: the unconnected variable's gradient is {outs[2]!r}")
    c.same_on_all_ranks(outs[:2], f"{mode} IndexedSlices")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_two_teams_and_several_calls_in_one_graph(tf_session, mode):
    """Several gradients() calls on both teams inside one graph (chained per team so
    that every rank opens the groups in the same order), the graph run three times."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    specs = [
        ((1001,), np.float32, 1),
        ((65,), np.float64, 2),
        ((n + 1,), np.int32, 3),
        ((300,), np.float32, 4),
        ((9,), DTYPES[3], 5),
        ((2, 3), np.int64, 6),
    ]

    def fn(t):
        a = mc.gradients(t[0:2], team=0)
        b = mc.gradients(t[2:4], team=1)
        cc = mc.gradients(t[4:5], team=0)
        d = mc.gradients([t[5], t[0]], team=1)
        return a + b + cc + d

    arrays = [make_input(r, s, d, seed) for s, d, seed in specs]
    want_specs = specs[:5] + [specs[5], specs[0]]
    for run, outs in enumerate(run_in_mode(mode, fn, [arrays] * 3)):
        check_outputs(c, outs, want_specs, n, f"{mode} run {run}")
    c.finish()


def test_tensor_types_and_inputs_untouched(tf_session):
    """Results are new tf.Tensors of the input dtype and shape; inputs (variables,
    tensors, NumPy arrays) keep their values."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    a = make_input(r, (5, 2), np.float32, 1)
    b = make_input(r, (3,), np.int64, 2)
    var = tf.Variable(a)
    t = tf.constant(b)
    nd = make_input(r, (4,), np.float64, 3)
    outs = mc.gradients([var, t, nd])
    c.true(all(isinstance(o, tf.Tensor) for o in outs), f"result types {outs!r}")
    for o, x in zip(outs, [a, b, nd]):
        c.true(o.dtype == tf_dtype(x.dtype), f"result dtype {o.dtype}, want {x.dtype}")
        c.true(tuple(o.shape) == x.shape, f"result shape {o.shape}, want {x.shape}")
    c.equal(var.numpy(), a, "variable changed")
    c.equal(t.numpy(), b, "tensor changed")
    c.equal(nd, make_input(r, (4,), np.float64, 3), "numpy input changed")
    c.equal(to_numpy(outs[2]), expected_average((4,), np.float64, n, 3), "numpy input's result")
    c.finish()


def test_numpy_helpers_under_tensorflow(tf_session):
    """average and check_buffers_match stay NumPy helpers with framework="tensorflow"."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    x = make_input(r, (1001,), np.float32, 9)
    out = mc.average(x)
    c.true(out is x, "average did not work in place")
    c.equal(x, expected_average((1001,), np.float32, n, 9), "average")
    c.true(mc.check_buffers_match([x]) == 0, "check_buffers_match on averaged arrays != 0")
    own = [make_input(r, (7,), np.float32, 1)]
    c.true((mc.check_buffers_match(own) == 0) == (n == 1), "check_buffers_match on rank data")
    c.finish()


def test_graph_ops_one_pair_per_gradient(tf_session):
    """In a graph every gradient gets its own submit/wait pair (so each is reduced as
    soon as backprop produced it); unknown shapes use one fused op per dtype. At one
    rank there is no op at all: the average over one rank is the gradient itself. The
    graph is only built, never run (no collective)."""
    c = Checks()
    n = tf_session.nranks
    graph = tf.Graph()
    with graph.as_default():
        known = [tf.compat.v1.placeholder(tf.float32, [3, 4]) for _ in range(5)]
        known += [tf.compat.v1.placeholder(tf.int64, [7]) for _ in range(2)]
        outs = mc.gradients(known + [None])
        unknown = [tf.compat.v1.placeholder(tf.float32, None) for _ in range(3)]
        fused = mc.gradients(unknown)
    types = [op.type for op in graph.get_operations()]
    c.true(outs[-1] is None and all(o is not None for o in outs[:-1]), f"results {outs}")
    if n == 1:
        c.true(not any(t.startswith("MlComm") for t in types), f"ops at one rank: {types}")
        c.true(all(o is i for o, i in zip(outs, known)), "one rank: results are the inputs")
        c.true(all(o is i for o, i in zip(fused, unknown)), "one rank: fused results")
    else:
        submits, waits = types.count("MlCommGroupSubmit"), types.count("MlCommGroupWait")
        c.true(submits == 7, f"{submits} submits")
        c.true(waits == 7, f"{waits} waits")
        c.true(types.count("MlCommAllreduceN") == 1, f"{types.count('MlCommAllreduceN')} fused")
        c.true(all(o.op.type == "MlCommGroupWait" for o in outs[:-1]), "results are not waits")
        c.true(all(o.op.type == "MlCommAllreduceN" for o in fused), "fused results")
    c.finish()
