"""The Keras example trains to the accuracy threshold at 2 ranks with model.fit, Keras'
progress is printed by rank 0 only, and the ranks end with identical weights (the
example's own exit status)."""

from __future__ import annotations

import importlib.util

import pytest
from example_runner import run_example

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("tensorflow", "keras", "sklearn")),
    reason="needs TensorFlow, Keras 3 and scikit-learn (pip install 'ml_comm[tf,examples]')",
)


def test_keras_digits_two_ranks():
    out = run_example("keras_digits.py", "--epochs", "5", "--threads", "1")
    lines = out.splitlines()
    assert sum(line.startswith("# digits MLP") for line in lines) == 1, out  # rank 0 only
    assert "2 rank(s)" in lines[0], out
    # Keras' own per-epoch lines (verbose=2), once: the other rank ran with verbose=0.
    epochs = [line.split()[1] for line in lines if line.startswith("Epoch ")]
    assert epochs == ["1/5", "2/5", "3/5", "4/5", "5/5"], out
    summaries = [line for line in lines if " - loss: " in line or " - accuracy: " in line]
    assert len(summaries) == 5 and all("val_accuracy" in line for line in summaries), out
    assert lines[-1].startswith("OK: weights identical on all 2 rank(s), test accuracy"), out
