"""The TensorFlow examples train to the accuracy threshold at 2 ranks, print only on
rank 0, and end with identical variables on every rank (their own exit status)."""

from __future__ import annotations

import importlib.util

import pytest
from example_runner import run_example

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("sklearn") is None,
    reason="needs TensorFlow and scikit-learn (pip install 'ml_comm[tf,examples]')",
)


def test_tf2_digits_two_ranks():
    out = run_example("tf2_digits.py", "--epochs", "5", "--threads", "1")
    lines = out.splitlines()
    assert sum(line.startswith("# digits MLP") for line in lines) == 1, out  # rank 0 only
    assert "2 rank(s)" in lines[0], out
    epochs = [line.split()[1] for line in lines if line.startswith("epoch")]
    assert epochs == ["1", "2", "3", "4", "5"], out
    assert lines[-1].startswith("OK: weights identical on all 2 rank(s), test accuracy"), out


def test_tf1_graph_hooks_two_ranks():
    out = run_example("tf1_graph_hooks.py", "--steps", "125", "--log-every", "50")
    lines = out.splitlines()
    assert sum(line.startswith("# digits MLP") for line in lines) == 1, out  # rank 0 only
    assert "2 rank(s)" in lines[0], out
    # Reports every 50 steps and one for the last, partial stretch.
    steps = [line.split()[1] for line in lines if line.startswith("step")]
    assert steps == ["50", "100", "125"], out
    assert lines[-1].startswith("OK: variables identical on all 2 rank(s), test accuracy"), out
