"""The variable manager of ps_ml_comm: upstream's independent towers, one per rank,
made data parallel by averaging the gradients and broadcasting the initial values.

Upstream's VariableMgrIndependent gives each tower its own variables and applies
its own gradients; it exposes the two points needed here: get_gradients_to_apply
(where the average goes) and get_post_init_ops (run by the Supervisor's local init,
once the variables are initialized or restored, before the first step).
"""

from __future__ import annotations

import tensorflow.compat.v1 as tf

from .. import api as mc
from . import runtime


def manager_class(independent: type) -> type:
    """A subclass of upstream's VariableMgrIndependent (passed in: it lives in the
    user's copy of tf_cnn_benchmarks, not in ml_comm)."""

    class VariableMgrMLComm(independent):
        """--variable_update=ps_ml_comm: one tower per rank; gradients are averaged over
        all ranks by ml_comm, and every rank starts from rank 0's variables."""

        def get_gradients_to_apply(self, device_num, gradient_state):
            tower = gradient_state[device_num]
            grads = [g for g, _ in tower]
            with tf.device(self.benchmark_cnn.cpu_device):  # ml_comm's kernels run on CPU
                averaged = runtime.average(grads)
            if self.benchmark_cnn.enable_auto_loss_scale and device_num == 0:
                # From the averaged gradients, which are the same bits on every rank, so
                # that all ranks take the same loss-scale decision.
                finite = [tf.reduce_all(tf.is_finite(g)) for g in averaged]
                self.grad_has_inf_nan = tf.logical_not(tf.reduce_all(finite))
            return [(g, v) for g, (_, v) in zip(averaged, tower)]

        def get_post_init_ops(self):
            ops = list(super().get_post_init_ops())
            variables = tf.global_variables()
            if not variables:
                return ops
            runtime.ensure_teams(sum(v.shape.num_elements() or 0 for v in variables))
            with tf.device(self.benchmark_cnn.cpu_device):
                values = mc.broadcast(variables, 0)
            return ops + [tf.assign(v, x) for v, x in zip(variables, values)]

    return VariableMgrMLComm
