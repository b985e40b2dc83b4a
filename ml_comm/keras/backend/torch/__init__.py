"""The Keras hook on Keras' torch backend: gradients through ml_comm's NumPy path
(init's framework="numpy"), the tensors' memory handed over without a copy (`.numpy()`
of a CPU tensor, `torch.from_numpy` of the result); in Keras's own train step each
gradient is handed over as backprop produces it, so that the average overlaps backprop
(overlap.py); a torch DataLoader is cut to the fewest batches like any dataset. Keras
runs the torch train step eagerly (jit_compile would compile it with torch.compile, whose
graph breaks at the reduction)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import torch

from .... import api as mc
from ....core.errors import BadArgumentError, MLCommError, StateError
from .. import accumulation
from . import overlap
from .overlap import forget, install  # noqa: F401  (the backend protocol's)

FRAMEWORK = "numpy"
KEEPS_JIT = True
BROADCAST_IN_TRACE = False


def _host(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values as a NumPy array: its own memory on the CPU (no copy)."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:  # NumPy has no bfloat16: ml_dtypes' of the same bits
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _tensor(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    if array.dtype == ml_dtypes.bfloat16:
        out = torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    else:
        out = torch.from_numpy(np.asarray(array))
    return out if like.device.type == "cpu" else out.to(like.device)


def count_step(team: int) -> None:
    """Steps are not counted on this backend (a pipelined team's requests carry none)."""


def average(grads: list, team: int) -> list:
    step = overlap.active(team)
    if step is not None:  # handed over during backprop: wait for them
        return step.finish(grads)
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:  # still a call, of no tensors, that every rank makes
        mc.gradients([], team)
        return list(grads)
    tensors = [torch.as_tensor(grads[i]) for i in present]
    averaged = mc.gradients([_host(t) for t in tensors], team)
    result = list(grads)
    for i, a, t in zip(present, averaged, tensors):
        result[i] = _tensor(a, t)
    return result


def accumulate_then_average(optimizer, team, steps: int, grads: list, variables) -> list:
    return accumulation.accumulate_then_average(average, optimizer, team, steps, grads, variables)


def is_eager(grads) -> bool:
    return not torch.compiler.is_compiling()


def to_numpy(value) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(value))


def broadcast_values(values: list, root: int, team: int) -> list:
    import keras

    arrays = [np.array(keras.ops.convert_to_numpy(v)) for v in values]  # written in place
    mc.broadcast(arrays, root, team)
    return arrays


def sync_before_first_update(optimizer, state, grads, variables, broadcast_eagerly):
    raise StateError(
        "ml_comm.keras: the first update of this optimizer is being compiled "
        "(torch.compile) before rank 0's weights were broadcast; call "
        "ml_comm.keras.broadcast_weights(model) before the first compiled step"
    )


def batches_of(x) -> int | None:
    if not isinstance(x, torch.utils.data.DataLoader):
        return None
    try:
        return len(x)
    except TypeError:  # an IterableDataset without a length
        return -1


class _FirstBatchesSampler:
    """The first `count` batches of a batch sampler, every epoch."""

    def __init__(self, inner, count: int):
        self.inner, self.count = inner, count

    def __iter__(self):
        return itertools.islice(iter(self.inner), self.count)

    def __len__(self) -> int:
        return min(self.count, len(self.inner))


def first_batches(loader: torch.utils.data.DataLoader, count: int):
    """The loader cut to its first `count` batches per epoch: the same dataset, sampler,
    collation and workers."""
    if loader.batch_sampler is None:
        raise BadArgumentError(
            "uneven data: this DataLoader has no batch sampler (batch_size=None), so ml_comm "
            f"cannot cut it to {count} batches per epoch; give every rank the same number "
            "of batches"
        )
    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_sampler=_FirstBatchesSampler(loader.batch_sampler, count),
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
    )


def failed_step_error(exc: BaseException) -> MLCommError | None:
    return None
