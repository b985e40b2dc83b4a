"""`horovod.tensorflow.util` on ml_comm: the helpers scripts and test suites import
from it."""

from __future__ import annotations

import tensorflow as tf

from ..surface import refs_to_vars, vars_to_refs  # noqa: F401


def _executing_eagerly() -> bool:
    """Whether TensorFlow runs eagerly here (not while a graph or tf.function is built)."""
    return tf.executing_eagerly()
