"""core/patches.py: the attributes a front end replaces on other libraries' classes come
back as they were, own or inherited; Horovod's Keras 3 shims through it."""

from __future__ import annotations

from ml_comm.core.patches import Patches


class Base:
    def inherited(self):
        return "base"


class Child(Base):
    def own(self):
        return "own"


def test_replaced_attributes_come_back_in_reverse_order():
    patches = Patches()
    assert not patches
    patches.replace(Child, "own", lambda self: "first")
    patches.replace(Child, "own", lambda self: "second")  # replaced twice
    patches.replace(Child, "inherited", lambda self: "wrapped")
    patches.replace(Child, "added", 7)
    assert patches and Child().own() == "second" and Child().inherited() == "wrapped"
    patches.restore()
    assert not patches
    assert Child().own() == "own" and Child().inherited() == "base"
    assert "inherited" not in vars(Child) and not hasattr(Child, "added")
    assert Base().inherited() == "base"


def test_horovod_keras3_shims_are_undone():
    import keras

    from ml_comm.horovod import keras3

    installed = bool(keras3._patches)  # importing ml_comm.horovod.tensorflow installs them
    keras3.uninstall()
    compile_, had_lr = keras.Model.compile, hasattr(keras.optimizers.Optimizer, "lr")
    try:
        keras3.install()
        keras3.install()  # twice: nothing more
        assert keras.Model.compile is not compile_
        optimizer = keras.optimizers.SGD(0.5)
        assert optimizer.lr == 0.5 and optimizer.variables() == optimizer.variables
    finally:
        keras3.uninstall()
    assert keras.Model.compile is compile_
    assert hasattr(keras.optimizers.Optimizer, "lr") == had_lr
    assert not callable(keras.optimizers.SGD(0.5).variables)
    if installed:  # as the other tests of this process found them
        keras3.install()
