"""Two teams called in another order on another rank through TensorFlow: rank 0 trains on
team 0 then team 1, the others the other way round.

    mpiexec -n N python tf_cross_order_job.py MODE TOKEN

MODE: eager  `gradients` of eager tensors on each team
      keras  two Keras models, one per team (set_team), a train_on_batch each
Every rank waits for a request the others never make: the deadlock check
(ML_COMM_DEADLOCK_SECONDS) must end the job; "was not stopped" says it did not.
TOKEN is only there so that the test can find this job's processes in /proc.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ml_comm as mc  # noqa: E402
import ml_comm.keras as mk  # noqa: E402


def main() -> int:
    mode = sys.argv[1]
    if mode == "eager":
        mc.init(1, 2, 4096, "tensorflow")
    else:
        mk.init(nthread_per_team=1, nteams=2)
    rank = mc.get_rank()
    order = (0, 1) if rank == 0 else (1, 0)
    if mode == "eager":
        mc.broadcast([tf.Variable(tf.zeros(2))], 0)
        for team in order:
            mc.gradients([tf.ones(4)], team=team)
    else:
        models = []
        for team in (0, 1):
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            model.compile(optimizer="sgd", loss="mse")
            models.append(mk.set_team(model, team))
        x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
        for team in order:
            models[team].train_on_batch(x, y)
    print(f"rank {rank} was not stopped", flush=True)
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
