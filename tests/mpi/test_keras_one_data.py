"""fit on ranks that were all given the same training arrays: rank 0 warns, once a
session, that they train on copies of one data set; sharded data gets no warning. The
module's own session: the warning is said once per session, so the cases run in order."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras_helpers import keras_ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

WARNING = "every rank was given the same training data"


@pytest.fixture(scope="module")
def keras_session():
    with keras_ml_comm_session(nthread_per_team=1, nteams=1, msglen=64) as session:
        yield session


def fit_and_say(capfd, sharded: bool) -> int:
    """How often this rank warned during one fit of 40 integer samples (all of them, or
    this rank's rows rank::nranks)."""
    rank, nranks = mc.get_rank(), mc.get_nranks()
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, size=(40, 4)).astype(np.float32)
    y = rng.integers(-3, 4, size=(40, 2)).astype(np.float32)
    if sharded:
        x, y = x[rank::nranks], y[rank::nranks]
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    capfd.readouterr()
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return capfd.readouterr().err.count(WARNING)


def test_sharded_data_is_not_warned(keras_session, capfd):
    assert fit_and_say(capfd, sharded=True) == 0


def test_one_data_set_is_warned_by_rank_zero(keras_session, capfd):
    rank, nranks = keras_session
    said = fit_and_say(capfd, sharded=False)
    assert said == (1 if rank == 0 and nranks > 1 else 0), f"rank {rank}: said {said} times"


def test_the_warning_is_said_once_a_session(keras_session, capfd):
    assert fit_and_say(capfd, sharded=False) == 0
