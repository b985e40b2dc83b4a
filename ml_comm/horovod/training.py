"""Horovod's training wrappers: DistributedGradientTape and DistributedOptimizer
(Keras 3 optimizers and tf.compat.v1.train optimizers), reducing each gradient
exactly once, where the script asks (docs/horovod.md).

The optimizer wrappers return the same instance with its gradient entry point
replaced on that instance only (Horovod returns a new object): checkpoints and
models that hold it keep working. Keras 3's entry point is `apply`, which comes
before gradient clipping and weight decay; a LossScaleOptimizer is reduced in
its own `apply`, before its finite check, so every rank skips a step together.
"""

from __future__ import annotations

import types
import weakref

import tensorflow as tf

from ..core.errors import StateError
from . import basics
from .compression import Compression
from .ops import (
    Average,
    Sum,
    _check_op,
    averaging_gradients,
    check_process_set,
    global_process_set,
    grouped_allreduce,
)


class GradientReducer:
    """How a wrapper reduces a list of gradients (None stays None). The gradients of
    variables registered as local (Partial* wrappers) are not reduced: they are divided
    by the number of ranks unless scale_local_gradients=False, as Horovod does."""

    def __init__(
        self,
        op=Average,
        compression=Compression.none,
        sparse_as_dense=False,
        gradient_predivide_factor=1.0,
        process_set=global_process_set,
        scale_local_gradients=True,
    ):
        check_process_set(process_set)
        _check_op(op)
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        self.op = op
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.predivide = float(gradient_predivide_factor)
        self.local: list = []
        self.scale_local = scale_local_gradients

    def is_local(self, variable) -> bool:
        return any(variable is v for v in self.local)

    def __call__(self, grads, variables=None) -> list:
        grads = list(grads)
        if variables is None or len(variables) != len(grads):
            local = [False] * len(grads)
        else:
            local = [self.is_local(v) for v in variables]
        shared = [i for i, is_local in enumerate(local) if not is_local]
        out = list(grads)
        for i, g in zip(shared, self._reduced([grads[i] for i in shared])):
            out[i] = g
        n = basics.size()
        for i, is_local in enumerate(local):
            g = out[i]
            if is_local and self.scale_local and g is not None:
                if isinstance(g, tf.IndexedSlices):
                    out[i] = tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
                else:
                    out[i] = g / n
        return out

    def _reduced(self, grads: list) -> list:
        if self.sparse_as_dense:
            grads = [
                tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads
            ]
        present = [i for i, g in enumerate(grads) if g is not None]
        session = basics.session()
        if not present:  # still a call, of no tensors, that every rank makes
            return session.backend.gradients(grads, 0)
        # Horovod checks nothing; a script without broadcast_variables (or its callback)
        # trains a model per rank, so ml_comm's weights check judges it: at the second
        # eager step, or at a traced step's second run (its ops judge each run).
        if not session.weights.settled:
            session.weights.averaged(
                tf.executing_eagerly(), 0, grads, session.calls.identity()[0], "horovod"
            )
        # Horovod's predivision: Average's 1/size joins the postscale factor in the reduction.
        pre, post = 1.0 / self.predivide, self.predivide
        with averaging_gradients():
            reduced = grouped_allreduce(
                [grads[i] for i in present],
                op=self.op,
                compression=self.compression,
                prescale_factor=pre,
                postscale_factor=post,
            )
        out = list(grads)
        for i, r in zip(present, reduced):
            out[i] = r
        return out


def _check_no_groups(num_groups, groups) -> None:
    if groups not in (None, 0) or num_groups:
        raise NotImplementedError(
            "groups/num_groups: ml_comm fuses all gradients of one call by itself; leave them out"
        )


# ---------------------------------------------------------------- gradient tape


class _DistributedTape(tf.GradientTape):
    """A GradientTape whose gradient() returns gradients reduced over all ranks."""

    def gradient(
        self,
        target,
        sources,
        output_gradients=None,
        unconnected_gradients=tf.UnconnectedGradients.NONE,
        use_generic_names=False,
    ):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        return tf.nest.pack_sequence_as(grads, self._hvd_reduce(flat_grads, flat_sources))

    def register_local_source(self, source):
        """Keep this variable's gradient local: not reduced (divided by size unless
        scale_local_gradients=False)."""
        self._hvd_reduce.local.append(source)

    def get_local_and_global_gradients(
        self, target, sources, output_gradients=None, use_generic_names=False
    ):
        grads = self.gradient(target, sources, output_gradients)
        local, shared = [], []
        for s, g in zip(sources, grads):
            (local if self._hvd_reduce.is_local(s) else shared).append((s, g))
        return local, shared


def DistributedGradientTape(
    gradtape,
    device_dense="",
    device_sparse="",  # noqa: N802
    compression=Compression.none,
    sparse_as_dense=False,
    op=Average,
    gradient_predivide_factor=1.0,
    num_groups=0,
    groups=None,
    process_set=global_process_set,
    scale_local_gradients=True,
):
    """The tape, turned into one whose gradient() reduces over all ranks (op: Average)."""
    _check_no_groups(num_groups, groups)
    reducer = GradientReducer(
        op, compression, sparse_as_dense, gradient_predivide_factor, process_set,
        scale_local_gradients,
    )  # fmt: skip
    tape = _DistributedTape.__new__(_DistributedTape)
    tape.__dict__.update(gradtape.__dict__)  # the recording already made, and its settings
    tape._hvd_reduce = reducer
    return tape


def PartialDistributedGradientTape(
    gradtape,
    device_dense="",
    device_sparse="",  # noqa: N802
    compression=Compression.none,
    sparse_as_dense=False,
    op=Average,
    gradient_predivide_factor=1.0,
    num_groups=0,
    groups=None,
    process_set=global_process_set,
    local_layers=None,
    scale_local_gradients=True,
):
    """A DistributedGradientTape whose local_layers' variables keep their own gradients."""
    # Every other parameter is DistributedGradientTape's, passed on by name.
    tape_settings = dict(locals())
    local_layers = tape_settings.pop("local_layers")
    tape = DistributedGradientTape(**tape_settings)
    tape._hvd_reduce.local += _local_variables(local_layers)
    return tape


def _local_variables(local_layers) -> list:
    """The trainable variables of local_layers (a layer, a list of layers or None)."""
    import keras

    if local_layers is None:
        return []
    layers = local_layers if isinstance(local_layers, (list, tuple)) else [local_layers]
    for layer in layers:
        if not isinstance(layer, keras.layers.Layer):
            raise ValueError(f"local_layers must be Keras layers, got {type(layer).__name__}")
    return [v for layer in layers for v in layer.trainable_weights]


# ---------------------------------------------------------------- optimizers


_accumulators: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Accumulator:
    """backward_passes_per_step: local sums of the gradients between two reductions."""

    def __init__(self, variables):
        with tf.init_scope():
            self.count = tf.Variable(0, dtype=tf.int64, trainable=False)
            self.sums = [
                tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in variables
            ]


def _is_keras_optimizer(optimizer) -> bool:
    import keras

    return isinstance(optimizer, keras.optimizers.Optimizer)


def DistributedOptimizer(
    optimizer,
    name=None,
    use_locking=False,
    device_dense="",  # noqa: N802
    device_sparse="",
    compression=Compression.none,
    sparse_as_dense=False,
    backward_passes_per_step=1,
    op=Average,
    gradient_predivide_factor=1.0,
    average_aggregated_gradients=False,
    num_groups=0,
    groups=None,
    process_set=global_process_set,
    scale_local_gradients=True,
):
    """The same optimizer instance, now reducing its gradients over all ranks first.

    backward_passes_per_step=k: gradients are summed locally over k calls and reduced
    once, on the k-th (divided by k when average_aggregated_gradients=True); the
    variables change on the k-th call only, while `iterations` counts every call.
    """
    _check_no_groups(num_groups, groups)
    if isinstance(backward_passes_per_step, bool) or int(backward_passes_per_step) < 1:
        raise ValueError(
            f"backward_passes_per_step must be an int >= 1, got {backward_passes_per_step!r}"
        )
    if getattr(optimizer, "_hvd_reducer", None) is not None:
        raise ValueError(
            "this optimizer is already a DistributedOptimizer (ml_comm.horovod returns the "
            "same instance); wrap it once"
        )
    reducer = GradientReducer(
        op, compression, sparse_as_dense, gradient_predivide_factor, process_set,
        scale_local_gradients,
    )  # fmt: skip
    steps = int(backward_passes_per_step)
    if _is_keras_optimizer(optimizer):
        _wrap_keras(optimizer, reducer, steps, average_aggregated_gradients)
    elif isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if steps != 1:
            raise NotImplementedError(
                "backward_passes_per_step > 1 with a tf.compat.v1.train optimizer; use a "
                "Keras optimizer or accumulate gradients in the script"
            )
        _wrap_v1(optimizer, reducer)
    else:
        raise TypeError(
            f"DistributedOptimizer takes a Keras 3 optimizer or a tf.compat.v1.train "
            f"optimizer, got {type(optimizer).__name__}"
        )
    optimizer._hvd_reducer = reducer
    return optimizer


def PartialDistributedOptimizer(
    optimizer,
    name=None,
    device_dense="",  # noqa: N802
    device_sparse="",
    compression=Compression.none,
    sparse_as_dense=False,
    gradient_predivide_factor=1.0,
    op=Average,
    groups=None,
    process_set=global_process_set,
    local_layers=None,
    scale_local_gradients=True,
):
    """DistributedOptimizer whose local_layers' variables keep their own gradients (not
    reduced; divided by the number of ranks unless scale_local_gradients=False)."""
    # Every other parameter is DistributedOptimizer's, passed on by name.
    settings = dict(locals())
    if op not in (Average, Sum):
        raise ValueError("PartialDistributedOptimizer: op must be hvd.Average or hvd.Sum")
    local = _local_variables(settings.pop("local_layers"))
    optimizer = DistributedOptimizer(**settings)
    optimizer._hvd_reducer.local += local
    return optimizer


def _check_no_keras_hook(keras) -> None:
    """ml_comm.keras's hook reduces every Keras update itself: with it a DistributedOptimizer
    would reduce each gradient twice."""
    if getattr(keras.optimizers.Optimizer.apply, "__module__", "").startswith("ml_comm.keras"):
        raise StateError(
            "ml_comm.keras.init() is active: its hook already reduces every Keras update; "
            "use either ml_comm.keras or ml_comm.horovod's DistributedOptimizer, not both"
        )


def _wrap_keras(optimizer, reducer, steps: int, average_aggregated: bool) -> None:
    import keras

    _check_no_keras_hook(keras)
    original = optimizer.apply  # the LossScaleOptimizer's own, before its finite check
    if steps > 1 and isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise NotImplementedError(
            "backward_passes_per_step > 1 with a LossScaleOptimizer: wrap the inner "
            "optimizer's gradients with DistributedGradientTape instead"
        )

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = (
            list(trainable_variables)
            if trainable_variables is not None
            else list(getattr(self, "_trainable_variables", None) or [])
        )
        if steps == 1:
            return original(reducer(grads, variables), trainable_variables)
        if not self.built:
            with tf.init_scope():
                self.build(variables)
        acc = _accumulators.get(self)
        if acc is None:
            acc = _accumulators[self] = _Accumulator(variables)
        for s, g in zip(acc.sums, grads):
            if g is not None:
                s.assign_add(tf.convert_to_tensor(g))
        count = acc.count.assign_add(1)

        def update():
            summed = [s.read_value() if g is not None else None for s, g in zip(acc.sums, grads)]
            if average_aggregated:
                summed = [None if g is None else g / steps for g in summed]
            original(reducer(summed, variables), variables)
            for s in acc.sums:
                s.assign(tf.zeros_like(s))
            return tf.constant(True)

        def skip():
            self.iterations.assign_add(1)
            return tf.constant(False)

        tf.cond(tf.equal(count % steps, 0), update, skip)

    optimizer.apply = types.MethodType(apply, optimizer)


def _wrap_v1(optimizer, reducer) -> None:
    original = optimizer.compute_gradients

    def compute_gradients(self, *args, **kwargs):
        pairs = original(*args, **kwargs)
        grads = reducer([g for g, _ in pairs], [v for _, v in pairs])
        return list(zip(grads, [v for _, v in pairs]))

    optimizer.compute_gradients = types.MethodType(compute_gradients, optimizer)
