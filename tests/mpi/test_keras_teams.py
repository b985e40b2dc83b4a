"""Two models on two ml_comm teams, trained in alternation with train_on_batch, in the
style of a Keras GAN: a discriminator D on team 1 and the combined model G -> D (D
frozen) on team 0. At N ranks with per-rank batch b both must end within 1e-5 relative
of one process that trains the same two models, from the same (broadcast) weights, on
the global batches of N*b; both teams must have reduced. See mpi_helpers.py for the rules.
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = pytest.mark.mpi

with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)

Z, F = 4, 3  # latent size, sample size
B = 4  # per-rank batch
STEPS = 3
LR = 0.05
RTOL = 1e-5


@pytest.fixture(scope="module")
def two_teams():
    comm_world().barrier()
    mk.init(nthread_per_team=1, nteams=2, msglen=256)
    try:
        yield mc.get_rank(), mc.get_nranks()
    finally:
        mk.finalize()


def make_gan(seed: int):
    """(generator, discriminator, combined): D compiled trainable, the combined model
    compiled with D frozen, as in Keras' GAN examples."""
    keras.utils.set_random_seed(seed)
    g = keras.Sequential([keras.Input((Z,)), keras.layers.Dense(F)], name="generator")
    d = keras.Sequential(
        [keras.Input((F,)), keras.layers.Dense(2, activation="tanh"), keras.layers.Dense(1)],
        name="discriminator",
    )
    d.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
    d.trainable = False
    z = keras.Input((Z,))
    combined = keras.Model(z, d(g(z)), name="combined")
    combined.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
    d.trainable = True
    return g, d, combined


def data(nranks: int):
    rng = np.random.default_rng(7)
    rows = STEPS * nranks * B
    real = rng.integers(-2, 3, size=(rows, F)).astype(np.float32)
    z1 = rng.integers(-2, 3, size=(rows, Z)).astype(np.float32)
    z2 = rng.integers(-2, 3, size=(rows, Z)).astype(np.float32)
    return real, z1, z2


def train(g, d, combined, real, z1, z2, rows) -> None:
    """One alternation per step: D on real (label 1) and generated (label 0) samples,
    then G through the frozen D (label 1). rows(s) selects step s's rows."""
    for s in range(STEPS):
        fake = g(z1[rows(s)]).numpy()
        x = np.concatenate([real[rows(s)], fake])
        y = np.concatenate([np.ones((len(fake), 1)), np.zeros((len(fake), 1))]).astype(np.float32)
        d.trainable = True
        d.train_on_batch(x, y)
        d.trainable = False
        combined.train_on_batch(z2[rows(s)], np.ones((len(fake), 1), np.float32))


def test_two_models_two_teams(two_teams):
    c = Checks()
    r, n = two_teams
    real, z1, z2 = data(n)
    g, d, combined = make_gan(r)
    mk.set_team(d, 1)
    mk.set_team(combined, 0)
    c.true((mk.get_team(d), mk.get_team(combined)) == (1, 0), "get_team")
    initial = [w.copy() for w in combined.get_weights()]  # G's and D's
    c.same_on_all_ranks(initial, "weights after set_team")
    calls = [mc.team_stats(t)["calls"] for t in (0, 1)]

    train(g, d, combined, real, z1, z2, lambda s: slice(s * n * B + r * B, s * n * B + (r + 1) * B))

    ref_g, ref_d, ref_combined = make_gan(12345)
    mk.set_team(ref_d, None)  # the reference trains on this process alone
    mk.set_team(ref_combined, None)
    ref_combined.set_weights(initial)
    train(ref_g, ref_d, ref_combined, real, z1, z2, lambda s: slice(s * n * B, (s + 1) * n * B))

    for name, model, ref in (("generator", g, ref_g), ("discriminator", d, ref_d)):
        got = model.get_weights()
        c.same_on_all_ranks(got, f"{name}: weights after training")
        c.true(mc.check_buffers_match(got) == 0, f"{name}: check_buffers_match")
        for i, (w, want) in enumerate(zip(got, ref.get_weights())):
            err = float(np.max(np.abs(w - want)))
            scale = float(np.max(np.abs(want)))
            c.true(
                err <= RTOL * scale,
                f"{name}: weight {i} differs from the single-process reference by {err:.3g} "
                f"(max |w_ref| = {scale:.3g})",
            )
        c.true(
            any(not np.array_equal(a, b) for a, b in zip(got, model_initial(initial, name))),
            f"{name}: the weights did not change",
        )
    if n > 1:
        for t in (0, 1):
            c.true(mc.team_stats(t)["calls"] > calls[t], f"team {t} did not reduce")
    c.finish()


def model_initial(initial, name):
    """combined.get_weights() lists G's weights (2) before D's (4)."""
    return initial[:2] if name == "generator" else initial[2:]
