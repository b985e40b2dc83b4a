"""ml_comm/keras/compile_config.py, in one process: the description of what a model was
compiled with is the same for ranks that compiled alike, whatever else each process made
first (Keras numbers names per process), and differs, line by line, where they did not."""

from __future__ import annotations

import pytest

keras = pytest.importorskip("keras")
from ml_comm.keras.compile_config import describe, differences  # noqa: E402


def two_outputs(optimizer, extra_layers: int, **compile_kwargs):
    for _ in range(extra_layers):  # other objects first: other auto-numbered names
        keras.layers.Dense(1)
        keras.optimizers.SGD()
    inputs = keras.Input((3,))
    outputs = [keras.layers.Dense(1)(inputs), keras.layers.Dense(2)(inputs)]
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=optimizer, **compile_kwargs)
    return model


def alike(extra_layers: int):
    model = two_outputs(
        keras.optimizers.LossScaleOptimizer(
            keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(0.1, 100))
        ),
        extra_layers,
        loss=None,
        metrics=[keras.metrics.MeanMetricWrapper(lambda a, b: a - b), "mae"],
    )
    names = model.output_names
    model.compile(
        optimizer=model.optimizer,
        loss={names[0]: "mse", names[1]: keras.losses.MeanAbsoluteError()},
        loss_weights={names[0]: 1.0, names[1]: 0.5},
        metrics=[keras.metrics.MeanMetricWrapper(lambda a, b: a - b), "mae"],
    )
    return model


def test_ranks_that_compiled_alike_read_alike():
    first, second = alike(0), alike(3)
    assert first.output_names != second.output_names  # the names differ, the setups not
    assert describe(first) == describe(second)
    assert "a lambda" in describe(first)["metrics"]


def test_a_built_optimizers_learning_rate_is_left_to_the_broadcast():
    """A built optimizer's learning rate is a variable, which the first broadcast gives
    rank 0's value (a checkpoint restored on rank 0 alone); an unbuilt one's is each
    rank's own and compared."""
    model = two_outputs(keras.optimizers.SGD(0.1), 0, loss="mse")
    assert describe(model)["optimizer's learning_rate"] == "0.1"
    model.optimizer.build(model.trainable_variables)
    assert "optimizer's learning_rate" not in describe(model)


def test_differences_name_each_setting_and_rank():
    sgd = [two_outputs(keras.optimizers.SGD(lr), 0, loss="mse") for lr in (0.1, 0.1, 0.2)]
    assert differences([describe(m) for m in sgd]) == [
        "optimizer's learning_rate: ranks 0-1: 0.1; rank 2: 0.2"
    ]
    adam = two_outputs(keras.optimizers.Adam(0.1), 0, loss="mse", metrics=["mae"])
    assert differences([describe(sgd[0]), describe(adam)]) == [
        "optimizer: rank 0: SGD; rank 1: Adam",
        'metrics: rank 0: not given; rank 1: ["mae"]',
    ]


def test_an_optimizer_built_on_some_ranks_only_says_so():
    built, fresh = (two_outputs(keras.optimizers.Adam(0.01), 0, loss="mse") for _ in range(2))
    built.optimizer.build(built.trainable_variables)
    assert differences([describe(built), describe(fresh)]) == [
        "optimizer's variables: rank 0: built; rank 1: not built yet"
    ]


def test_a_long_setting_shows_where_it_differs():
    many = ["mae", "mse", "mape", "msle", "cosine_similarity", "logcosh", "poisson"] * 3
    models = [
        two_outputs(keras.optimizers.SGD(), 0, loss="mse", metrics=many + [last])
        for last in ("mae", "mse")
    ]
    (line,) = differences([describe(m) for m in models])
    assert line.startswith("metrics: rank 0: ...") and '"mae"]' in line and '"mse"]' in line


def test_a_configuration_it_cannot_read_reads_alike():
    class Loops(keras.losses.Loss):
        def call(self, y_true, y_pred):
            return keras.ops.mean(y_pred)

        def get_config(self):
            return {"me": self}  # refers to itself: no plain text exists

    model = two_outputs(keras.optimizers.SGD(), 0, loss=Loops())
    assert describe(model) == {"compile configuration": "unreadable (RecursionError)"}
