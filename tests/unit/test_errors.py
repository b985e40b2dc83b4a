"""The classes of ml_comm's errors: one per failure status of the core, read from the
header's `enum mlc_status`, each with its code as `.status`, exported from ml_comm."""

from __future__ import annotations

import pytest
from ml_comm._core import ffi, lib

import ml_comm as mc
from ml_comm.core import compression, settings
from ml_comm.core.status import CLASSES, check, error

# Every code of the enum, from the header through cffi: a status added to the core
# fails here until it has a class.
STATUSES = dict(ffi.typeof("enum mlc_status").relements)
NOT_FAILURES = {"MLC_OK", "MLC_PENDING"}


@pytest.mark.parametrize("name", sorted(set(STATUSES) - NOT_FAILURES))
def test_every_failure_status_has_its_own_class(name):
    code = STATUSES[name]
    cls = CLASSES.get(code)
    assert cls is not None, f"{name} ({code}) has no class in ml_comm.core.errors"
    assert issubclass(cls, mc.MLCommError) and issubclass(cls, RuntimeError)
    assert cls.status_name == name
    assert getattr(mc, cls.__name__) is cls, f"ml_comm does not export {cls.__name__}"
    assert cls.__name__ in mc.__all__
    raised = error(code, "what failed")
    assert type(raised) is cls and raised.status == code and str(raised) == "what failed"


def test_the_classes_are_distinct_and_cover_no_other_code():
    assert len(set(CLASSES.values())) == len(CLASSES)
    assert set(CLASSES) == {STATUSES[n] for n in set(STATUSES) - NOT_FAILURES}


def test_named_kinds():
    assert mc.MismatchError.status_name == "MLC_ERR_MISMATCH"
    assert mc.MismatchError("x").status == lib.MLC_ERR_MISMATCH
    assert mc.NonFiniteError("x").status == lib.MLC_ERR_NONFINITE
    assert mc.StallError("x").status == lib.MLC_ERR_STALL
    assert mc.PeerLostError("x").status == lib.MLC_ERR_PEER_LOST
    assert mc.StateError("x").status == lib.MLC_ERR_STATE
    assert mc.WireOverflowError("x").status == lib.MLC_ERR_OVERFLOW
    assert mc.MLCommError("a setup failure").status is None


def test_builtin_bases_kept_for_existing_except_clauses():
    assert issubclass(mc.BadArgumentError, ValueError)
    assert issubclass(mc.BadArgumentTypeError, TypeError)
    assert issubclass(mc.BadArgumentTypeError, mc.BadArgumentError)
    assert mc.BadArgumentTypeError("x").status == lib.MLC_ERR_ARG
    assert issubclass(mc.SettingsError, ValueError)
    assert issubclass(mc.SettingsError, mc.BadArgumentError)
    assert issubclass(mc.OutOfMemoryError, MemoryError)
    assert not issubclass(mc.WireOverflowError, OverflowError)


def test_check_raises_the_class_of_the_status():
    check(lib.MLC_OK, "nothing")
    with pytest.raises(mc.MismatchError, match=r"^average failed: rank 1 submitted 3$") as info:
        check(lib.MLC_ERR_MISMATCH, "average", ffi.new("char[]", b"rank 1 submitted 3"))
    assert info.value.status == lib.MLC_ERR_MISMATCH
    with pytest.raises(mc.PeerLostError, match="a rank left the job"):
        check(lib.MLC_ERR_PEER_LOST, "gradients")  # no text: the core's words for it


@pytest.mark.parametrize(
    "env",
    [
        {"ML_COMM_CHECK_FINITE": "perhaps"},
        {"ML_COMM_CHUNK_BYTES": "1M"},
        {"ML_COMM_STALL_WARN_SECONDS": "soon"},
    ],
)
def test_a_bad_setting_raises_settings_error(env):
    with pytest.raises(mc.SettingsError) as info:
        settings.check_all(env)
    assert info.value.status == lib.MLC_ERR_ARG


def test_a_bad_compression_setting_raises_settings_error():
    with pytest.raises(mc.SettingsError, match=r"ML_COMM_COMPRESSION must be 'none', 'bf16'"):
        compression.from_env({"ML_COMM_COMPRESSION": "zip"})
    # the same word as an argument (config_team) is a bad argument, not a setting
    with pytest.raises(mc.BadArgumentError) as info:
        compression.code("zip", "config_team: compression")
    assert type(info.value) is mc.BadArgumentError


def test_a_cuda_array_where_only_host_arrays_go_says_so():
    """A collective given a device array (a stand-in with __cuda_array_interface__) says which
    calls take device arrays."""
    from ml_comm.arrays.buffers import as_array

    stand_in = type("ndarray", (), {"__module__": "cupy", "__cuda_array_interface__": {}})()
    with pytest.raises(mc.BadArgumentTypeError, match=r"a CUDA array: gradients, average and"):
        as_array(stand_in, "allgather value")


@pytest.mark.parametrize(
    "module, hint",
    [
        ("torch", "a CPU torch tensor's .numpy() shares its memory: pass that"),
        ("jax._src.array", "for JAX arrays, init ml_comm with framework='jax'"),
        (
            "tensorflow.python.framework.ops",
            "for TensorFlow tensors, init ml_comm with framework='tensorflow'",
        ),
    ],
)
def test_a_framework_array_where_numpy_is_wanted_says_what_to_do(module, hint):
    """The message names the type and what to pass instead (a stand-in of the framework's
    class: only its module decides the hint)."""
    from ml_comm.arrays.buffers import as_array

    stand_in = type("Tensor", (), {"__module__": module})()
    with pytest.raises(mc.BadArgumentTypeError) as raised:
        as_array(stand_in, "gradients[0]")
    assert str(raised.value) == f"gradients[0] must be a numpy.ndarray, got Tensor ({hint})"
