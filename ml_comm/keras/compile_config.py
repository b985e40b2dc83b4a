"""What a model was compiled with, as text the ranks compare before its first broadcast.

Ranks whose optimizers differ (another class, learning rate or schedule), or that
compiled other losses or metrics, or on JAX and torch another `jit_compile`, build
the same weights and average the same gradients, but apply them differently: their
weights drift apart without an error (the metrics' states then differ in size at the
epoch's end, which reads as different step counts). `describe` gives each setting as
text, so that model_check.py names the ones that differ, with who has what.

Not compared: names (Keras numbers them per process), seeds and the layers' own
configuration (initializers and dropout seeds may differ by rank on purpose).
Read: the compile arguments Keras keeps in the private `Model._compile_config`
(its public `get_compile_config` serializes them and fails on a lambda), checked
against the installed Keras by tests/unit/test_keras_private.py.
"""

from __future__ import annotations

import json
import numbers
from typing import Any

import numpy as np

from ..core.settings_check import disagreements

# Longest text of one setting in a message; the comparison uses all of it.
SHOWN = 120
# Keys of a configuration that may differ between ranks that train alike.
_NOT_COMPARED = frozenset({"name", "seed"})
BUILT = "optimizer's variables"


def describe(model) -> dict[str, str]:
    """{setting: text} of what the model was compiled with ({} before compile). Never
    raises: a configuration it cannot read reads "unreadable" on every rank alike."""
    try:
        return _described(model)
    except Exception as exc:  # noqa: BLE001  (a user's get_config; every rank the same)
        return {"compile configuration": f"unreadable ({type(exc).__name__})"}


def _described(model) -> dict[str, str]:
    config = getattr(getattr(model, "_compile_config", None), "config", None)
    if not getattr(model, "compiled", False) or not isinstance(config, dict):
        return {}
    described: dict[str, str] = {}
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        described["optimizer"] = type(optimizer).__name__
        built = bool(getattr(optimizer, "built", False))
        described[BUILT] = "built" if built else "not built yet"
        # A built optimizer's learning rate is a variable, which the first broadcast
        # gives rank 0's value (a checkpoint restored on rank 0 alone); an unbuilt one's
        # stays each rank's own.
        _flatten(
            "optimizer's ", _config_of(optimizer), described, {"learning_rate"} if built else set()
        )
    outputs = list(getattr(model, "output_names", None) or [])
    for key in ("loss", "loss_weights", "metrics", "weighted_metrics"):
        if config.get(key) is not None:
            described[key] = _text(_plain(_by_position(config[key], outputs)))
    described["jit_compile"] = str(bool(model.jit_compile))
    return described


def _by_position(value, outputs: list[str]):
    """A dict keyed by the model's output names (numbered per process) keyed by their
    positions instead."""
    if isinstance(value, dict) and value and all(k in outputs for k in value):
        return {f"output {outputs.index(k)}": v for k, v in value.items()}
    return value


def _flatten(prefix: str, config: dict, out: dict[str, str], skip: set[str]) -> None:
    """Nested configurations (a LossScaleOptimizer's inner optimizer, a schedule) as one
    entry per leaf, so that a message names the one that differs; a number under a key
    in `skip` is left out."""
    for key, value in config.items():
        if isinstance(value, dict):
            _flatten(f"{prefix}{key}.", value, out, skip)
        elif not (key in skip and isinstance(value, (int, float))):
            out[f"{prefix}{key}"] = _text(value)


def _config_of(obj) -> dict[str, Any]:
    """A Keras object's configuration without its name; {} where it has none."""
    try:
        config = obj.get_config()
    except Exception:  # noqa: BLE001  (NotImplementedError, or a user's class failing)
        return {}
    return _plain(config) if isinstance(config, dict) else {}


def _plain(value) -> Any:
    """JSON-ready: containers as they are, functions by name, Keras objects (losses,
    metrics, schedules) by class and configuration, anything else by its type."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        if value.get("class_name") == "__lambda__":  # Keras's: the code, its file and line
            return "a lambda"
        # Names and seeds left out, also of nested objects.
        return {str(k): _plain(v) for k, v in value.items() if k not in _NOT_COMPARED}
    if callable(value) and hasattr(value, "__qualname__"):  # a function, or a class
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    if hasattr(value, "get_config"):
        return {"class": type(value).__name__, **_config_of(value)}
    return f"a {type(value).__name__}"


def _text(value) -> str:
    """A leaf as it reads: text bare, a float32's value by its shortest digits (0.1, not
    0.10000000149011612), anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and float(np.float32(value)) == value:
        return str(np.float32(value))
    return json.dumps(value, sort_keys=True, default=str)


def differences(described: list[dict[str, str]]) -> list[str]:
    """One line per setting whose text differs between the ranks (a rank's `describe`
    each), e.g. "optimizer's learning_rate: rank 0: 0.1; rank 1: 0.2"; where the optimizer's
    class differs, that line alone speaks for the optimizer, and where it is built on
    some ranks only, so does the line of its variables for the settings left out there."""
    classes = {d.get("optimizer") for d in described}
    built = {d.get(BUILT) for d in described}

    def speaks(name: str) -> bool:
        if not name.startswith("optimizer's ") or name == BUILT:
            return True
        if len(classes) > 1:
            return False
        return len(built) == 1 or all(name in d for d in described)

    return disagreements(
        [{k: v for k, v in d.items() if speaks(k)} for d in described], longest=SHOWN
    )
