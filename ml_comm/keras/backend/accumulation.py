"""Gradient accumulation on backends whose traced steps must not assign inside a branch
(JAX's lax.cond traces both branches into pure functions): only the reduction sits in
the conditional, on the update micro-step; the accumulators are zeroed with a select.
Keras's own accumulation then sees what apply.py's docstring says it must."""

from __future__ import annotations

from collections.abc import Callable

import keras


def inputs(optimizer, grads: list, variables) -> tuple[list[int], list, list]:
    """(the indices of the gradients present, those gradients as tensors, Keras's
    accumulator of each), building the optimizer first if it is not yet (every backend)."""
    if variables is None:
        variables = list(optimizer._trainable_variables)
    elif not optimizer.built:
        with keras.name_scope(optimizer.name, caller=optimizer):
            optimizer.build(variables)
    present = [i for i, g in enumerate(grads) if g is not None]
    local = [keras.ops.convert_to_tensor(grads[i]) for i in present]
    accumulators = [
        optimizer._accumulated_gradients[optimizer._get_variable_index(variables[i])]
        for i in present
    ]
    return present, local, accumulators


def accumulate_then_average(
    average: Callable[[list, int], list], optimizer, team, steps: int, grads: list, variables
) -> list:
    present, local, accumulators = inputs(optimizer, grads, variables)
    is_update = keras.ops.equal((optimizer._iterations + 1) % steps, 0)
    sums = [keras.ops.convert_to_tensor(a) for a in accumulators]
    totals = [g + s for g, s in zip(local, sums)]
    averaged = keras.ops.cond(is_update, lambda: average(totals, team), lambda: totals)
    for a, s in zip(accumulators, sums):
        a.assign(keras.ops.where(is_update, keras.ops.zeros_like(s), s))
    result = list(grads)
    for i, avg, g in zip(present, averaged, local):
        result[i] = keras.ops.where(is_update, avg, g)
    return result
