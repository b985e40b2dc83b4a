"""The rest of horovod.tensorflow's names: TF1 global-variable broadcast, synchronised
batch normalisation, and Horovod's small utilities."""

from __future__ import annotations

import warnings

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


# Keras 2 BatchNormalization arguments that Keras 3 refuses, with the value that means
# what Keras 3 does anyway (Horovod's layer requires fused=False).
_KERAS2_ONLY = {"fused": False, "renorm": False, "virtual_batch_size": None, "adjustment": None}
_warned_keras2_arguments: set = set()


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """BatchNormalization whose training-time mean and variance are over every rank's
    batch (sums of count, x and x squared reduced across ranks). Horovod's Keras 2
    arguments without a Keras 3 meaning (fused, renorm, virtual_batch_size, adjustment)
    are taken at the values that change nothing, with one warning; other values raise."""

    def __init__(self, **kwargs):
        dropped = {k: kwargs.pop(k) for k in list(kwargs) if k in _KERAS2_ONLY}
        for name, value in dropped.items():
            if value != _KERAS2_ONLY[name]:
                raise NotImplementedError(
                    f"SyncBatchNormalization({name}={value!r}) has no Keras 3 equivalent; "
                    f"leave {name} out"
                )
        new = sorted(set(dropped) - _warned_keras2_arguments)
        if new:
            _warned_keras2_arguments.update(new)
            warnings.warn(
                f"SyncBatchNormalization: Keras 2 argument(s) {', '.join(new)} ignored "
                "(Keras 3's BatchNormalization has none; the values given change nothing)",
                stacklevel=2,
            )
        super().__init__(**kwargs)

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
