"""A note on rank 0 at init when TensorFlow runs one inter-op thread.

With one inter-op thread TensorFlow's executor follows backprop's critical path (each
layer's input gradient) and leaves side outputs, some weight gradients among them (a
Dense kernel's MatMul, BatchNorm's, some Conv2DBackpropFilter), queued until that path
ends (ml_comm/tensorflow/unordered.py). A reduction goes through the fused buffer in
order, so one late tensor near its front holds the rest back. A second inter-op thread,
even on one core, runs them as they become ready. Measured on the 2-node test bed at 2
Gbit/s, one core per node (benchmarks/keras_backends.md): of Keras ResNet-50's tape
gradients' time, the reduction overlapped none with one inter-op thread, 60-61 % with two.
"""

from __future__ import annotations

import os

NOTE = (
    "ml_comm: TensorFlow runs one inter-op thread, which leaves some weight gradients "
    "until backprop's critical path ends, and the reduction waits for them instead of "
    "overlapping backprop; give it two "
    "(tf.config.threading.set_inter_op_parallelism_threads(2) before the first op, or "
    "TF_NUM_INTEROP_THREADS=2), even on one core (docs/launch.md)"
)


def inter_op_threads() -> int:
    """The inter-op threads TensorFlow runs or will run: as configured, else from
    TF_NUM_INTEROP_THREADS, else its default, one per core this process may use."""
    import tensorflow as tf

    configured = tf.config.threading.get_inter_op_parallelism_threads()
    if configured > 0:
        return configured
    try:
        from_env = int(os.environ.get("TF_NUM_INTEROP_THREADS", "0"))
    except ValueError:
        from_env = 0
    return from_env if from_env > 0 else len(os.sched_getaffinity(0))


def note() -> str | None:
    """The note, where TensorFlow runs one inter-op thread; else None."""
    return NOTE if inter_op_threads() == 1 else None
