"""Inside tf.function with ONE inter-op thread, a step's gradients reach ml_comm as
backprop produces them: TensorFlow then runs a step's ops depth first, and an op with no
inputs (a gradient group's opener) only after everything else, so gradients that waited
for it would all arrive at the step's end, leaving nothing to overlap.

    mpiexec -n N python tf_overlap_one_thread.py TOKEN

Trains a small CNN for a few steps in a tf.function with mc.gradients and reads the
team's timeline: prints "rank R arrival-span-ms S step-ms T exact E", S being the time
from the first to the last gradient's arrival in the last step's group (E: the ranks'
weights agree bit for bit). TOKEN is only there for the test's process search.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import tensorflow as tf

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)

import keras  # noqa: E402
from ml_comm._core import lib  # noqa: E402

import ml_comm as mc  # noqa: E402
from ml_comm.core import timeline  # noqa: E402

STEPS = 4


def main() -> int:
    mc.init(1, 1, 1 << 18, "tensorflow")
    r = mc.get_rank()
    keras.utils.set_random_seed(1)
    inp = keras.Input((32, 32, 3))
    h = inp
    for width in (16, 32, 32, 64):
        h = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    model = keras.Model(inp, keras.layers.Dense(10)(h))
    optimizer = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(r)
    x = tf.constant(rng.integers(0, 4, (8, 32, 32, 3)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, 8))
    mc.broadcast(list(model.weights), 0)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = mc.gradients(tape.gradient(loss, model.trainable_variables), 0)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    step()  # traced
    team = mc.api.session().team(0)
    timeline.enable([team])
    t0 = time.monotonic()
    for _ in range(STEPS):
        step()
    step_ms = (time.monotonic() - t0) / STEPS * 1e3
    arrivals = [e for e in timeline.read(team) if e["kind"] == lib.MLC_EVENT_ARRIVE]
    last = [e["start"] for e in arrivals if e["request"] == arrivals[-1]["request"]]
    span_ms = (max(last) - min(last)) * 1e3
    exact = mc.check_buffers_match([v.numpy() for v in model.weights], flag=1) == 0
    print(
        f"rank {r} arrival-span-ms {span_ms:.2f} step-ms {step_ms:.1f} exact {int(exact)}",
        flush=True,
    )
    mc.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
