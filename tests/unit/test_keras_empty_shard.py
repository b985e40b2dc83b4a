"""ml_comm/keras/fit.py's evaluate on a rank whose arrays have no rows: in one process,
the states it builds before the ranks' sum are those a rank that evaluated rows holds
(the same variables, shapes and order, or the collective sum would mismatch), all zero,
with no NaN: a multi-output model never trained (per-output loss trackers), metrics that
raise on zero rows (F1Score), sample and weighted metrics."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from ml_comm.keras import fit  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(8, 3)).astype(np.float32)


def shapes(model) -> list[tuple]:
    return [tuple(v.shape) for m in model.metrics for v in m.variables]


def multi_output():
    inputs = keras.Input((3,))
    outputs = {"a": keras.layers.Dense(1)(inputs), "b": keras.layers.Dense(2)(inputs)}
    model = keras.Model(inputs, outputs)
    model.compile("sgd", loss="mse", metrics={"a": ["mae"]})
    return model, {"a": np.ones((8, 1), np.float32), "b": np.ones((8, 2), np.float32)}, {}


def f1_score():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("sgd", "categorical_crossentropy", metrics=[keras.metrics.F1Score(), "auc"])
    return model, np.eye(2, dtype=np.float32)[RNG.integers(0, 2, 8)], {}


def weighted():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    model.compile(
        "sgd",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseTopKCategoricalAccuracy(k=2)],
        weighted_metrics=["accuracy"],
    )
    return model, RNG.integers(0, 4, 8), {"sample_weight": np.ones(8, np.float32)}


@pytest.mark.parametrize("make", [multi_output, f1_score, weighted])
def test_an_empty_shard_holds_the_states_of_one_with_rows(monkeypatch, make):
    rows, y, extra = make()
    rows.evaluate(X, y, verbose=0, **extra)
    empty, _, _ = make()
    monkeypatch.setattr(fit, "sum_metric_states", lambda model, team: shapes(model))
    arguments = {"x": X[:0], "y": keras.tree.map_structure(lambda a: a[:0], y)}
    arguments.update({k: v[:0] for k, v in extra.items()})
    assert fit._evaluate_nothing(empty, arguments, 0) == shapes(rows)
    states = [np.asarray(v) for m in empty.metrics for v in m.variables]
    assert all(not np.any(s) for s in states)  # nothing counted, no NaN
