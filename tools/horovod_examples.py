"""Run a Horovod example script unchanged (but for its import lines) on ml_comm.horovod,
offline and short, and check what it did:

    mpiexec -n 3 .venv/bin/python tools/horovod_examples.py --steps 40 --epochs 2 \
        /tmp/tensorflow2_keras_mnist.py [script args...]

- keras.datasets.mnist.load_data answers with scikit-learn's 8x8 digits upscaled to
  28x28 uint8 images (no download);
- the run is shortened: Keras fit runs at most --epochs epochs of at most --steps steps,
  and a tf.data pipeline's take(n) takes at most --steps elements;
- `horovod.*` imports are answered by ml_comm.horovod, as `python -m ml_comm.horovod` does;
- at the end rank 0 says whether every rank holds the same trainable weights in each Keras
  model, and whether the losses of each fit of two epochs or more fell.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import runpy
import sys

import numpy as np


def digits_as_mnist(path="mnist.npz"):
    from sklearn.datasets import load_digits

    digits = load_digits()
    # 8x8 values 0..16 -> 24x24 by repeating each pixel 3x3, padded to 28x28, 0..255.
    images = np.kron(digits.images, np.ones((3, 3))) * (255.0 / 16.0)
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))).round().astype(np.uint8)
    labels = digits.target.astype(np.uint8)
    split = len(images) * 5 // 6
    return (images[:split], labels[:split]), (images[split:], labels[split:])


def shorten(steps: int, epochs: int) -> list:
    import keras
    import tensorflow as tf

    keras.datasets.mnist.load_data = digits_as_mnist
    tf.keras.datasets.mnist.load_data = digits_as_mnist
    histories = []
    fit = keras.Model.fit

    def short_fit(self, *args, **kwargs):
        kwargs["epochs"] = min(kwargs.get("epochs", 1), epochs)
        if kwargs.get("steps_per_epoch"):
            kwargs["steps_per_epoch"] = min(kwargs["steps_per_epoch"], steps)
        history = fit(self, *args, **kwargs)
        histories.append(history.history)
        return history

    keras.Model.fit = short_fit
    take = tf.data.Dataset.take
    tf.data.Dataset.take = lambda self, count, name=None: take(self, min(int(count), steps))
    return histories


def weight_digest(variables) -> str:
    h = hashlib.sha256()
    for v in variables:
        h.update(np.ascontiguousarray(v.numpy()).tobytes())
    return h.hexdigest()[:16]


def report(histories: list) -> int:
    import keras

    from ml_comm.mpi.init import init_mpi

    comm = init_mpi().COMM_WORLD
    models = [o for o in gc.get_objects() if isinstance(o, keras.Model) and o.built]
    # Trainable weights must agree; non-trainable ones (batch normalisation's moving
    # statistics) follow each rank's own batches, in Horovod as here.
    mine = [weight_digest(m.trainable_weights) for m in models]
    local = [weight_digest(m.non_trainable_weights) for m in models]
    everyone = comm.allgather(mine)
    same = all(d == everyone[0] for d in everyone)
    local_same = all(d == local for d in comm.allgather(local))
    rc = 0 if same and mine else 1
    if comm.rank == 0:
        print(
            f"trainable weights of {len(mine)} model(s) on {comm.size} ranks: "
            f"{'identical' if same else 'DIFFERENT'} {everyone[0]}; non-trainable: "
            f"{'identical' if local_same else 'per rank'}"
        )
        for h in histories:
            if len(h.get("loss", [])) < 2:
                continue  # a one-epoch fit (a script's warm-up) shows no trend
            losses = h.get("loss", [])
            fell = len(losses) > 1 and losses[-1] < losses[0]
            shown = ", ".join(f"{x:.4f}" for x in losses)
            print(f"fit losses [{shown}]: {'fell' if fell else 'did not fall'}")
            rc |= 0 if fell else 1
    return rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ml_comm.horovod.aliases import install

    install()
    histories = shorten(options.steps, options.epochs)
    sys.argv = [options.script, *options.args]
    runpy.run_path(options.script, run_name="__main__")
    return report(histories)


if __name__ == "__main__":
    sys.exit(main())
