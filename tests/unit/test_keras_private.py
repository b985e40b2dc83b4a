"""The private Keras names ml_comm.keras reads behave as it assumes, in the installed Keras.

ml_comm/keras/apply.py's gradient accumulation hands its gradients to Keras's own
accumulators: it reads `optimizer._iterations` (micro-steps, checkpointed),
`optimizer._accumulated_gradients` and `optimizer._get_variable_index(variable)`, and a
standalone optimizer's `_trainable_variables`; model_check.py reads `Model._compile_config`; fit.py
builds a model with `Model._symbolic_build` on JAX and torch. A
Keras release that renames or changes them fails here, in one process, before any
multi-rank test trains wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")


def value(x) -> np.ndarray:
    """A variable's or tensor's value, on any Keras backend."""
    return keras.ops.convert_to_numpy(x)


def tensors(*values) -> list:
    """float32 tensors of the backend (torch's optimizers take no NumPy arrays)."""
    return [keras.ops.convert_to_tensor(np.array(v, np.float32)) for v in values]


def test_accumulation_state_is_where_the_hook_reads_it():
    v = keras.Variable(np.array([1.0, 2.0], np.float32))
    w = keras.Variable(np.array([[3.0]], np.float32))
    opt = keras.optimizers.SGD(1.0, gradient_accumulation_steps=2)
    opt.build([v, w])
    assert [opt._get_variable_index(x) for x in (v, w)] == [0, 1]
    acc_v = opt._accumulated_gradients[opt._get_variable_index(v)]
    assert tuple(acc_v.shape) == (2,)

    opt.apply(tensors([4.0, 6.0], [[2.0]]), [v, w])
    assert int(value(opt._iterations)) == 1  # micro-steps, not updates
    assert int(value(opt.iterations)) == 0
    assert value(acc_v).tolist() == [4.0, 6.0]  # the first micro-step's gradient, kept
    assert value(v).tolist() == [1.0, 2.0]  # not applied yet

    # The hook zeroes the accumulators and hands on the cycle's total: Keras applies
    # (total + 0) / steps and zeroes them again.
    for a in opt._accumulated_gradients:
        a.assign(np.zeros(a.shape, np.float32))
    opt.apply(tensors([8.0, 12.0], [[4.0]]), [v, w])
    assert int(value(opt._iterations)) == 2
    assert value(v).tolist() == [1.0 - 4.0, 2.0 - 6.0]
    assert value(w).tolist() == [[3.0 - 2.0]]
    assert value(acc_v).tolist() == [0.0, 0.0]


def test_accumulators_and_micro_steps_are_saved_with_the_optimizer():
    v = keras.Variable(np.array([1.0], np.float32))
    opt = keras.optimizers.Adam(0.1, gradient_accumulation_steps=2)
    opt.build([v])
    saved = {id(x) for x in opt.variables}
    assert id(opt._iterations) in saved
    assert all(id(a) in saved for a in opt._accumulated_gradients)


def test_symbolic_build_builds_model_and_optimizer():
    """fit.py's train_on_batch on JAX and torch builds a model first, as Keras's own
    train_on_batch does (`Model._symbolic_build(data_batch=...)`), so that rank 0's
    weights are broadcast before the compiled step reads them."""
    model = keras.Sequential([keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    assert not model.built and not model.optimizer.built
    x, y = np.ones((3, 4), np.float32), np.zeros((3, 2), np.float32)
    model._symbolic_build(data_batch=(x, y, None))
    assert model.built and model.optimizer.built
    assert [tuple(w.shape) for w in model.weights] == [(4, 2), (2,)]


def test_a_built_optimizer_holds_its_weights():
    """broadcast_weights before a compiled step of the user's clears the first update's
    broadcast where a standalone optimizer's weights, read here, were broadcast."""
    v = keras.Variable(np.array([1.0], np.float32))
    w = keras.Variable(np.array([[3.0]], np.float32))
    opt = keras.optimizers.SGD(1.0)
    opt.build([v, w])
    assert [id(x) for x in opt._trainable_variables] == [id(v), id(w)]


def test_compile_arguments_are_where_the_model_check_reads_them():
    """model_check.py compares what each rank compiled (compile_config.py) from the
    arguments Keras keeps, as given, in Model._compile_config.config."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    config = model._compile_config.config
    assert config["loss"] == "mse" and config["metrics"] == ["mae"]
