"""The calls benchmarks/allreduce.py times on ml_comm's side (--api), each on a list of
tensors that are views of one flat buffer, so that MPI_Allreduce can run on the same bytes:

- gradients:     results = mc.gradients(tensors): a new result list each call; the previous
                 one is kept until the call returns, as a training loop keeps last step's;
- gradients-tfmem: the same on copies of the views, each in memory of its own that
                 TensorFlow's CPU allocator gave a tensor, as the tf op's inputs are: what the
                 core's reduction of the op's buffers costs without the op around it;
- tf:            the TensorFlow op inside tf.function, the caller holding the input tensors
                 (they cannot be overwritten: the op allocates its results);
- tf-forwarded:  the same with the gradients computed inside the function (here x * 2), so
                 TensorFlow hands the op buffers nobody else holds and the op reduces in place;
                 its time includes that multiply;
- average / allreduce_sum: mc.average(buf) / mc.allreduce_sum(buf) on the flat buffer, in place.

Each is a class with init_kwargs (for mc.init), bind(buf, views) (once per size), run() (the
timed call) and result() (the flat values to verify), and expect_average / scale (what the
verification expects).
"""

from __future__ import annotations

import numpy as np

import ml_comm as mc

APIS = ("gradients", "gradients-tfmem", "tf", "tf-forwarded", "average", "allreduce_sum")


class InPlace:
    scale = 1
    init_kwargs: dict = {}

    def __init__(self, api: str):
        self.fn = mc.average if api == "average" else mc.allreduce_sum
        self.expect_average = api == "average"

    def bind(self, buf, views):
        self.buf = buf

    def run(self) -> None:
        self.fn(self.buf)

    def result(self) -> np.ndarray:
        return self.buf


class Gradients:
    expect_average, scale = True, 1
    init_kwargs: dict = {}

    def bind(self, buf, views):
        self.views, self.last = views, None

    def run(self) -> None:
        self.last = mc.gradients(self.views)  # the previous results live until this returns

    def result(self) -> np.ndarray:
        return np.concatenate([r.ravel() for r in self.last]) if self.last else np.zeros(0)


class GradientsInTensorFlowMemory(Gradients):
    def bind(self, buf, views):
        own = []
        for v in views:
            array = tensorflow_memory(v.size, v.dtype).reshape(v.shape)
            array[...] = v
            own.append(array)
        super().bind(buf, own)


class TensorFlow:
    expect_average = True
    init_kwargs = {"framework": "tensorflow"}

    def __init__(self, forwarded: bool):
        import tensorflow as tf

        self.tf = tf
        self.scale = 2 if forwarded else 1
        if forwarded:
            self.fn = tf.function(lambda xs: mc.gradients([x * 2 for x in xs]))
            self.floor_fn = tf.function(lambda xs: [x * 2 for x in xs])
        else:
            self.fn = tf.function(lambda xs: mc.gradients(list(xs)))
            self.floor_fn = tf.function(lambda xs: [tf.identity(x) for x in xs])

    def bind(self, buf, views):
        # The caller's tensors, made once per size (their cost is not timed).
        self.inputs = [self.tf.constant(v) for v in views]
        self.last = None

    def run(self) -> None:
        self.last = self.fn(self.inputs)

    def floor(self) -> None:
        """The same function without ml_comm: what calling it costs TensorFlow alone."""
        self.floor_last = self.floor_fn(self.inputs)

    def result(self) -> np.ndarray:
        return np.concatenate([np.asarray(r).ravel() for r in self.last])


def make(api: str):
    if api == "gradients":
        return Gradients()
    if api == "gradients-tfmem":
        return GradientsInTensorFlowMemory()
    if api in ("tf", "tf-forwarded"):
        return TensorFlow(api == "tf-forwarded")
    return InPlace(api)


def split(buf: np.ndarray, shapes: list[tuple]) -> list[np.ndarray]:
    """Views of buf with the given shapes, back to back."""
    views, off = [], 0
    for s in shapes:
        n = int(np.prod(s, dtype=np.int64))
        views.append(buf[off : off + n].reshape(s))
        off += n
    return views


def tensorflow_memory(count: int, dtype) -> np.ndarray:
    """A writable array of zeros in memory that TensorFlow's CPU allocator gave a tensor
    (NumPy's own view of a tensor is read-only); the tensor lives as long as the array."""
    import ctypes

    import tensorflow as tf

    tensor = tf.zeros([count], dtype=tf.as_dtype(np.dtype(dtype)))
    view = np.asarray(tensor)
    raw = (ctypes.c_char * view.nbytes).from_address(view.ctypes.data)
    raw._tensor = tensor  # keeps TensorFlow's memory alive
    return np.frombuffer(raw, dtype=view.dtype)


def equal_shapes(count: int, ntensors: int) -> list[tuple]:
    base, extra = divmod(count, ntensors)
    return [(base + (i < extra),) for i in range(ntensors)]


def resnet50_shapes() -> list[tuple]:
    """The trainable variables of Keras' ResNet50 (weights=None: nothing is downloaded),
    in the order a training step lists their gradients: 214 tensors, 25.6 M parameters."""
    import keras

    model = keras.applications.ResNet50(weights=None)
    return [tuple(v.shape) for v in model.trainable_variables]
