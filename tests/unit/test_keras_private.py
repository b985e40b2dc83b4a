"""The private Keras names ml_comm.keras reads behave as it assumes, in the installed Keras.

ml_comm/keras/apply.py's gradient accumulation hands its gradients to Keras's own
accumulators: it reads `optimizer._iterations` (micro-steps, checkpointed),
`optimizer._accumulated_gradients` and `optimizer._get_variable_index(variable)`. A
Keras release that renames or changes them fails here, in one process, before any
multi-rank test trains wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")


def test_accumulation_state_is_where_the_hook_reads_it():
    v = keras.Variable(np.array([1.0, 2.0], np.float32))
    w = keras.Variable(np.array([[3.0]], np.float32))
    opt = keras.optimizers.SGD(1.0, gradient_accumulation_steps=2)
    opt.build([v, w])
    assert [opt._get_variable_index(x) for x in (v, w)] == [0, 1]
    acc_v = opt._accumulated_gradients[opt._get_variable_index(v)]
    assert tuple(acc_v.shape) == (2,)

    opt.apply([np.array([4.0, 6.0], np.float32), np.array([[2.0]], np.float32)], [v, w])
    assert int(opt._iterations.numpy()) == 1  # micro-steps, not updates
    assert int(opt.iterations.numpy()) == 0
    assert acc_v.numpy().tolist() == [4.0, 6.0]  # the first micro-step's gradient, kept
    assert v.numpy().tolist() == [1.0, 2.0]  # not applied yet

    # The hook zeroes the accumulators and hands on the cycle's total: Keras applies
    # (total + 0) / steps and zeroes them again.
    for a in opt._accumulated_gradients:
        a.assign(np.zeros(a.shape, np.float32))
    opt.apply([np.array([8.0, 12.0], np.float32), np.array([[4.0]], np.float32)], [v, w])
    assert int(opt._iterations.numpy()) == 2
    assert v.numpy().tolist() == [1.0 - 4.0, 2.0 - 6.0]
    assert w.numpy().tolist() == [[3.0 - 2.0]]
    assert acc_v.numpy().tolist() == [0.0, 0.0]


def test_accumulators_and_micro_steps_are_saved_with_the_optimizer():
    v = keras.Variable(np.array([1.0], np.float32))
    opt = keras.optimizers.Adam(0.1, gradient_accumulation_steps=2)
    opt.build([v])
    saved = {id(x) for x in opt.variables}
    assert id(opt._iterations) in saved
    assert all(id(a) in saved for a in opt._accumulated_gradients)
