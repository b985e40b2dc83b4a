"""The Keras 3 differences that Horovod scripts trip over, absorbed by narrow,
reversible wraps that only this front end installs (docs/horovod.md):

- `model.compile(experimental_run_tf_function=False)`: Keras 3 rejects the argument;
  the wrap drops that one argument and passes everything else on.
- `optimizer.variables()`: Keras 3 made `variables` a property holding a list; the list
  it returns can also be called, returning itself.
- `optimizer.lr`: Keras 3 names it `learning_rate`; `lr` reads and sets it.
"""

from __future__ import annotations

import functools

import keras

from ..core.patches import Patches

# The Keras attributes this front end replaces; uninstall (tests) restores them.
_patches = Patches()


class CallableList(list):
    """A list that returns itself when called, for `optimizer.variables()`."""

    def __call__(self):
        return self


def _defining(cls: type, name: str) -> type:
    """The class in cls's method order whose own attribute `name` is."""
    return next(c for c in cls.__mro__ if name in c.__dict__)


def install() -> None:
    if _patches:
        return
    # Replaced where Keras defines it (its Trainer): Keras compiles a loaded model only
    # where the model's compile is that class's own (Trainer.compile_from_config).
    trainer = _defining(keras.Model, "compile")
    model_compile = trainer.__dict__["compile"]
    base = _defining(keras.optimizers.Optimizer, "variables")  # BaseOptimizer
    variables = base.__dict__["variables"]

    @functools.wraps(model_compile)
    def compile(self, *args, experimental_run_tf_function=None, **kwargs):
        return model_compile(self, *args, **kwargs)

    _patches.replace(trainer, "compile", compile)
    _patches.replace(base, "variables", property(lambda self: CallableList(variables.fget(self))))
    if not hasattr(keras.optimizers.Optimizer, "lr"):
        lr = property(
            lambda self: self.learning_rate,
            lambda self, value: setattr(self, "learning_rate", value),
        )
        _patches.replace(keras.optimizers.Optimizer, "lr", lr)


def uninstall() -> None:
    _patches.restore()
