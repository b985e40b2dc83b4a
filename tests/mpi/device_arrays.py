"""Device arrays for tests/mpi/test_device_arrays.py, from the library that
ML_COMM_TEST_DEVICE_ARRAYS names: "fake" (the default: fake_cuda.c, a stand-in for the CUDA
driver over host memory, so the CPU suite runs the staging code), "cupy" or "torch" (on a
machine with a GPU)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

KIND = os.environ.get("ML_COMM_TEST_DEVICE_ARRAYS", "fake")
HERE = Path(__file__).resolve().parent


class HostMemoryArray:
    """Host memory presented as a device array (__cuda_array_interface__ over a NumPy
    buffer): what CUDA calls memory it does not know."""

    def __init__(self, a: np.ndarray):
        self.host = a
        self.__cuda_array_interface__ = {
            "shape": a.shape,
            "typestr": a.dtype.str,
            "data": (a.ctypes.data, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


class FakeArray:
    """An array in the fake driver's device memory."""

    def __init__(self, lib, shape, dtype, ordinal=0, stride=1):
        self.lib, self.shape, self.dtype = lib, tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.pointer = lib.fake_cuda_alloc(self.nbytes * stride, ordinal)
        strides = None
        if stride != 1:
            strides = tuple(s * stride for s in np.empty(self.shape, self.dtype).strides)
        self.__cuda_array_interface__ = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.pointer, False),
            "version": 3,
            "strides": strides,
            "stream": None,
        }

    def __del__(self):
        self.lib.fake_cuda_free(ctypes.c_void_p(self.pointer))


class FakeArrays:
    name = "fake"
    makes_results = False  # ml_comm makes results for CuPy and PyTorch only: pass out=
    devices = 2  # the fake driver has as many as asked for
    can_fail_copies = True
    dtypes_left_out = {np.dtype(ml_dtypes.bfloat16)}  # no typestr in the interface

    def __init__(self):
        path = Path(tempfile.gettempdir()) / f"ml_comm-fake-cuda-{os.getpid()}.so"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-o", str(path), str(HERE / "fake_cuda.c"),
             "-lpthread"], check=True)  # fmt: skip
        self.library = str(path)
        self.lib = ctypes.CDLL(self.library)
        self.lib.fake_cuda_alloc.restype = ctypes.c_void_p
        self.lib.fake_cuda_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int]
        self.lib.fake_cuda_free.argtypes = [ctypes.c_void_p]
        self.lib.fake_cuda_fail_copy.argtypes = [ctypes.c_long]

    def to_device(self, a: np.ndarray, ordinal: int = 0) -> FakeArray:
        a = np.asarray(a, order="C")  # 0-d stays 0-d
        x = FakeArray(self.lib, a.shape, a.dtype, ordinal)
        ctypes.memmove(x.pointer, a.ctypes.data, a.nbytes)
        return x

    def empty(self, shape, dtype) -> FakeArray:
        return FakeArray(self.lib, shape, dtype)

    def strided(self, a: np.ndarray) -> FakeArray:
        return FakeArray(self.lib, a.shape, a.dtype, stride=2)

    def to_host(self, x: FakeArray) -> np.ndarray:
        out = np.empty(x.shape, x.dtype)
        ctypes.memmove(out.ctypes.data, x.pointer, x.nbytes)
        return out

    def fail_copy(self, n: int) -> None:
        """Fail the n-th copy from now (1: the next)."""
        self.lib.fake_cuda_fail_copy(n)

    def is_result(self, x) -> bool:
        return isinstance(x, FakeArray)


class CupyArrays:
    name = "cupy"
    makes_results = True
    can_fail_copies = False
    dtypes_left_out = {np.dtype(ml_dtypes.bfloat16)}
    library = None

    def __init__(self):
        import cupy

        self.cupy = cupy
        self.devices = cupy.cuda.runtime.getDeviceCount()

    def to_device(self, a, ordinal=0):
        with self.cupy.cuda.Device(ordinal):
            return self.cupy.asarray(a)

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype)

    def strided(self, a):
        return self.cupy.asarray(np.repeat(a.reshape(-1), 2).reshape(*a.shape[:-1], -1))[..., ::2]

    def to_host(self, x):
        return self.cupy.asnumpy(x)

    def is_result(self, x) -> bool:
        return isinstance(x, self.cupy.ndarray)


class TorchArrays:
    name = "torch"
    makes_results = True
    can_fail_copies = False
    dtypes_left_out: set = set()
    library = None

    def __init__(self):
        import torch

        self.torch = torch
        self.devices = torch.cuda.device_count()

    def to_device(self, a, ordinal=0):
        a = np.asarray(a, order="C")
        if a.dtype == ml_dtypes.bfloat16:
            t = self.torch.from_numpy(a.view(np.int16)).view(self.torch.bfloat16)
        else:
            t = self.torch.from_numpy(a)
        return t.to(f"cuda:{ordinal}")

    def empty(self, shape, dtype):
        return self.to_device(np.empty(shape, dtype))

    def strided(self, a):
        return self.to_device(np.repeat(a.reshape(-1), 2).reshape(*a.shape[:-1], -1))[..., ::2]

    def to_host(self, x):
        x = x.cpu()
        if x.dtype == self.torch.bfloat16:
            return x.view(self.torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()

    def is_result(self, x) -> bool:
        return isinstance(x, self.torch.Tensor) and x.is_cuda


def make():
    return {"fake": FakeArrays, "cupy": CupyArrays, "torch": TorchArrays}[KIND]()
