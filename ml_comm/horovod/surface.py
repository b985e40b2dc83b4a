"""The rest of horovod.tensorflow's names: TF1 global-variable broadcast, synchronised
batch normalisation, and Horovod's small utilities."""

from __future__ import annotations

import keras
import tensorflow as tf

from .. import tensorflow as binding
from .functions import broadcast_variables
from .ops import Sum, grouped_allreduce


def broadcast_global_variables(root_rank):
    """TF1 graphs: an op that assigns root_rank's values to every global variable."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution; use "
            "hvd.broadcast_variables(model.variables, root_rank) instead"
        )
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A SessionRunHook that broadcasts every global variable from root_rank once the
    session is created."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


class LocalGradientAggregationHelper:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "LocalGradientAggregationHelper is internal to Horovod; use "
            "DistributedOptimizer(backward_passes_per_step=k)"
        )


@tf.custom_gradient
def _summed_with_gradient(*tensors):
    out = grouped_allreduce(list(tensors), op=Sum)

    def grad(*upstream):
        return grouped_allreduce(list(upstream), op=Sum)

    return out, grad


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """BatchNormalization whose training-time mean and variance are over every rank's
    batch (sums of count, x and x squared reduced across ranks)."""

    def _moments(self, inputs, mask):
        if mask is not None:
            raise NotImplementedError("SyncBatchNormalization does not take a mask")
        x = tf.cast(inputs, tf.float32) if inputs.dtype != tf.float64 else inputs
        axes = self._reduction_axes
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
        total, squares, n = _summed_with_gradient(
            tf.reduce_sum(x, axes), tf.reduce_sum(tf.square(x), axes), tf.reshape(count, [1])
        )
        mean = total / n
        variance = squares / n - tf.square(mean)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)


def check_extension(ext_name=None, ext_env_var=None, pkg_path=None, *args):
    """Raises if ml_comm's TensorFlow op library cannot be built or loaded."""
    binding.load_ops()


def check_num_rank_power_of_2(num_rank: int) -> bool:
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def device_compatibility_check(*args, **kwargs):
    raise NotImplementedError(
        "device_compatibility_check is TensorFlow's mixed-precision module, not part of "
        "ml_comm.horovod; use keras.mixed_precision directly"
    )


def gpu_available(ext_base_name="tensorflow", verbose=False) -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


def split_list(items, n: int) -> list:
    """items cut into n contiguous parts whose lengths differ by at most one."""
    q, r = divmod(len(items), n)
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    return [items[bounds[i] : bounds[i + 1]] for i in range(n)]


def vars_to_refs(variables):
    return [v.ref() for v in variables]


def refs_to_vars(refs):
    return [r.deref() for r in refs]
