"""The dtype table is the core's (ml_comm.h: mlc_dtype_name / _size / _is_float):
NumPy's, TensorFlow's and Keras' tables and the TF ops' type constraint are built
from it, and none of their sources lists dtypes of its own."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from ml_comm._core import ffi, lib

from ml_comm.core import dtypes as _dtypes

PACKAGE = Path(_dtypes.__file__).parents[1]
CORE_NAMES = [ffi.string(lib.mlc_dtype_name(code)).decode() for code in range(lib.MLC_NUM_DTYPES)]


def test_numpy_table_is_the_cores():
    assert list(_dtypes.NAMES.values()) == CORE_NAMES
    assert list(_dtypes.CODES.values()) == list(range(lib.MLC_NUM_DTYPES))
    for dtype, code in _dtypes.CODES.items():
        assert dtype.name == CORE_NAMES[code]
        assert dtype.itemsize == lib.mlc_dtype_size(code)
        assert (dtype.kind == "f" or dtype.name == "bfloat16") == bool(lib.mlc_dtype_is_float(code))
        assert (dtype.kind != "b") == bool(lib.mlc_dtype_is_reducible(code))
    assert _dtypes.FLOATS == {n for c, n in enumerate(CORE_NAMES) if lib.mlc_dtype_is_float(c)}
    assert _dtypes.SUPPORTED == ", ".join(CORE_NAMES)


# What docs/api.md ("Results, exactly") promises, written out by hand: the table the
# others are built from must hold exactly these (bool moved, never reduced).
DOCUMENTED_REDUCIBLE = {
    "float32", "float64", "float16", "bfloat16",
    "int32", "int64", "uint8", "int8", "uint16", "int16",
}  # fmt: skip


def test_core_table_is_the_documented_one():
    reducible = {n for c, n in enumerate(CORE_NAMES) if lib.mlc_dtype_is_reducible(c)}
    assert reducible == DOCUMENTED_REDUCIBLE
    assert set(CORE_NAMES) - reducible == {"bool"}
    floats = {n for c, n in enumerate(CORE_NAMES) if lib.mlc_dtype_is_float(c)}
    assert floats == {"float32", "float64", "float16", "bfloat16"}


def test_out_of_range_codes():
    for code in (-1, lib.MLC_NUM_DTYPES):
        assert ffi.string(lib.mlc_dtype_name(code)) == b"unknown"
        assert lib.mlc_dtype_size(code) == 0
        assert lib.mlc_dtype_is_float(code) == 0
        assert lib.mlc_dtype_is_reducible(code) == 0


def test_tensorflow_and_keras_tables_are_the_cores():
    import tensorflow as tf

    import ml_comm.keras.apply
    import ml_comm.tensorflow

    assert ml_comm.tensorflow.SUPPORTED == tuple(tf.as_dtype(n) for n in CORE_NAMES)
    assert [d.as_numpy_dtype for d in ml_comm.tensorflow.SUPPORTED] == list(_dtypes.CODES)
    assert ml_comm.keras.apply.SUPPORTED_DTYPES == frozenset(CORE_NAMES)


REDUCING_OPS = (
    "MlCommGroupOpen", "MlCommGroupSubmit", "MlCommGroupWait", "MlCommAllreduceN",
    "MlCommPipelinedAllreduceN", "MlCommAllreduceOp", "MlCommReducescatter",
)  # fmt: skip
MOVING_OPS = ("MlCommBroadcastN", "MlCommAllgather", "MlCommAlltoall")


def test_tf_ops_accept_exactly_the_cores_dtypes():
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry

    from ml_comm import tensorflow as binding

    binding.load_ops()
    every = {tf.as_dtype(n).as_datatype_enum for n in CORE_NAMES}
    reduced = {
        tf.as_dtype(n).as_datatype_enum
        for c, n in enumerate(CORE_NAMES)
        if lib.mlc_dtype_is_reducible(c)
    }
    assert reduced == every - {tf.bool.as_datatype_enum}
    for names, want in ((MOVING_OPS, every), (REDUCING_OPS, reduced)):
        for name in names:
            (attr,) = [a for a in op_def_registry.get(name).attr if a.name == "T"]
            assert set(attr.allowed_values.list.type) == want, name
    assert binding.REDUCED == tuple(tf.as_dtype(d) for d in _dtypes.REDUCED_CODES)


def test_no_second_list_in_the_sources():
    literal = re.compile(
        r"\b(np|tf|ml_dtypes)\.(float16|float32|float64|bfloat16|int32|int64|half)\b"
    )
    modules = ("core/dtypes.py", "keras/__init__.py", "keras/apply.py", "tensorflow/__init__.py",
               "tensorflow/backend.py")  # fmt: skip
    for name in modules:
        for number, line in enumerate((PACKAGE / name).read_text().splitlines(), 1):
            # one dtype on a line is a conversion (x.astype(np.float64)); two start a list
            assert len(literal.findall(line)) < 2, f"{name}:{number} lists dtypes: {line}"
    ops = PACKAGE / "tensorflow" / "ops"
    for source in ops.glob("*.c*"):
        text = source.read_text()
        assert not re.search(r"DT_(FLOAT|DOUBLE|HALF|BFLOAT16|INT32|INT64)\b", text), source.name
        assert "T: {" not in text, source.name
    rows = re.findall(r"Dtype<MLC_\w+, tensorflow::DT_\w+,", (ops / "common.h").read_text())
    assert len(rows) == lib.MLC_NUM_DTYPES


def test_numpy_names_round_trip():
    for name in CORE_NAMES:
        assert _dtypes.code_of(np.dtype(getattr(np, name, None) or _bfloat16())) == (
            CORE_NAMES.index(name)
        )


def _bfloat16():
    import ml_dtypes

    return ml_dtypes.bfloat16
