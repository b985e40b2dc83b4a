"""A job whose every rank meets the same error, or a process that runs alone.

    [mpiexec -n N] python speak_once_job.py CASE TOKEN

CASE:
  threads      rank 0 starts 2 threads per team, the others 3: init fails on every rank
  keras-model  rank 1 and above build a model with one more layer than rank 0's, and fit
  alone        init, one average and finalize, twice (run without a launcher)
  late         the last rank calls init 8 s after the others, then one average
  together     every rank calls init at once, then one average

The errors are left uncaught: ml_comm's exception hook prints them and ends the job.
TOKEN is only there so that the test can find this job's processes in /proc.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import ml_comm as mc


def threads() -> None:
    rank = mc.init_mpi().COMM_WORLD.Get_rank()
    mc.init(2 if rank == 0 else 3, 1, 1024)


def keras_model() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import ml_comm.keras as mk  # noqa: I001  (before keras, as the README's start)
    import keras

    mk.init()
    rank = mc.get_rank()
    extra = [keras.layers.Dense(3)] if rank > 0 else []
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), *extra])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((8, 4), np.float32)
    model.fit(x, np.ones((8, 3), np.float32), batch_size=4, epochs=1, verbose=0)
    mk.finalize()


def alone() -> None:
    for _ in range(2):
        mc.init(1, 1, 1024)
        value = mc.average(np.full(4, 3.0, np.float32))[0]
        print(f"rank {mc.get_rank()} of {mc.get_nranks()} averaged to {value}", flush=True)
        mc.finalize()


def late() -> None:
    world = mc.init_mpi().COMM_WORLD
    if world.Get_rank() == world.Get_size() - 1:
        time.sleep(8)
    mc.init(1, 1, 1024)
    value = mc.average(np.full(4, 3.0, np.float32))[0]
    print(f"rank {mc.get_rank()} averaged to {value}", flush=True)
    mc.finalize()


def together() -> None:
    mc.init(1, 1, 1024)
    print(f"rank {mc.get_rank()} averaged to {mc.average(np.ones(4, np.float32))[0]}", flush=True)
    mc.finalize()


CASES = {
    "threads": threads,
    "keras-model": keras_model,
    "alone": alone,
    "late": late,
    "together": together,
}

if __name__ == "__main__":
    CASES[sys.argv[1]]()
