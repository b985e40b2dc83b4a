"""Horovod's collectives on tensors, eager and in tf.function, on the session's
team 0 (docs/horovod.md). Every rank must make the same calls in the same
order, as with any ml_comm collective; the core compares what each call sends
and fails on every rank when they differ.

Sums and averages run through ml_comm's gradient op (the fused allreduce).
The arithmetic around it is Horovod's (its CPU path, horovod/common/ops): the
scale factors are float32 op attributes; Average is the sum times
postscale_factor / size, that quotient taken in double; a factor multiplies
floating tensors in their own dtype (16-bit ones in float32) with the factor
rounded to it, and integers in double, truncated toward zero. Allgather,
reducescatter, alltoall and the min, max and product reductions are the core's
collectives (docs/collectives.md), as ml_comm.tensorflow's ops. Every collective
has Horovod's gradient.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib

import numpy as np
import tensorflow as tf

from .. import tensorflow as binding
from .._core import lib
from ..core.errors import BadArgumentTypeError, refused
from ..tensorflow.arguments import checking, tensor_of
from . import basics
from .compression import Compression

# Horovod's reduction op codes.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5
OP_NAMES = {
    Average: "Average",
    Sum: "Sum",
    Adasum: "Adasum",
    Min: "Min",
    Max: "Max",
    Product: "Product",
}
CORE_OPS = {Min: "min", Max: "max", Product: "product", Sum: "sum"}


class ProcessSet:
    """The global process set: every rank of the session. Other sets are not supported."""

    process_set_id = 0

    def __init__(self, ranks=None):
        if ranks is not None:
            raise NotImplementedError(
                "ml_comm.horovod has only the global process set (hvd.global_process_set); "
                "to reduce several models independently use ml_comm teams (docs/api.md)"
            )

    def size(self) -> int:
        return basics.size()

    def rank(self) -> int:
        return basics.rank()

    def included(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "ProcessSet(global)"


global_process_set = ProcessSet()


def check_process_set(process_set) -> None:
    if process_set is not global_process_set and process_set is not None:
        raise NotImplementedError(
            f"process_set={process_set!r}: ml_comm.horovod runs every collective on the "
            f"global process set only; leave process_set out"
        )


def add_process_set(process_set):
    ProcessSet(getattr(process_set, "ranks", process_set))


def remove_process_set(process_set):
    check_process_set(process_set)
    raise ValueError("the global process set cannot be removed")


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule: `average` (deprecated) and `op` are exclusive; neither means Average."""
    if op is not None:
        if average is not None:
            raise ValueError(
                "The op parameter supersedes average. Please provide only one of them."
            )
        return op
    if average is not None:
        return Average if average else Sum
    return Average


def _team_id() -> int:
    return basics.session().team_ids[0]


def _checked(kind: int):
    """The block in which a call checks and converts its arguments, before
    ml_comm.tensorflow builds any op: what one rank raises there (a None, an op or a
    process set the others do not name) is told to the other ranks' op of that kind
    (MLC_KIND_*), which would otherwise wait for one this rank never runs. No op is built
    inside: ml_comm.tensorflow tells its own refusals."""
    return checking(_team_id(), kind)


# Horovod scales 16-bit floats in float32 (one rounding, after the multiplication) and
# integers in float64 (truncated, as a C cast does).
_SCALED_IN = {tf.float16: tf.float32, tf.bfloat16: tf.float32}


def _as_attribute(factor) -> float:
    """A scale factor as Horovod's ops receive it: a float32 attribute, widened to double."""
    return float(np.float32(factor))


def _scale(tensor, factor: float):
    """tensor * factor as Horovod's ScaleBuffer computes it; factor == 1 leaves it alone,
    as Horovod skips the scaling then."""
    if factor == 1.0:
        return tensor
    dtype = tensor.dtype
    wide = _SCALED_IN.get(dtype, dtype if dtype.is_floating or dtype.is_complex else tf.float64)
    # tf.constant, not tf.cast: a Python float cast to float64 passes through float32.
    if wide == dtype:
        return tensor * tf.constant(factor, dtype)
    return tf.cast(tf.cast(tensor, wide) * tf.constant(factor, wide), dtype)


def _check_op(op) -> None:
    if op == Adasum:
        raise NotImplementedError(
            "op=Adasum is not supported by ml_comm.horovod; use op=Average (the default) or op=Sum"
        )
    if op not in OP_NAMES:
        raise ValueError(f"op must be one of hvd.Average, Sum, Min, Max, Product; got {op!r}")


def _reduction_op(op, average, process_set):
    """allreduce's op after the checks: the process set, Horovod's rule for the deprecated
    `average`, then the op itself."""
    check_process_set(process_set)
    op = handle_average_backwards_compatibility(op, average)
    _check_op(op)
    return op


def _label(name, place, op, prescale_factor, postscale_factor) -> int:
    """A Sum's or Average's tensor's mlc_tensor.label: a digest of what Horovod pairs
    ranks' tensors by (the name the caller gave, and the place in a grouped call) and of
    how they are reduced (the op and the scale factors, which the core's sum does not
    see), so that ranks whose calls differ there fail instead of pairing. Never 0 (none)."""
    key = repr((name, place, OP_NAMES[op], _as_attribute(prescale_factor),
                _as_attribute(postscale_factor)))  # fmt: skip
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") or 1


def _summed(
    tensors: list, average: bool = False, prescale_factor=1.0, postscale_factor=1.0, labels=None
) -> list:
    """Horovod's Sum or Average over all ranks of a list of dense tensors, scale factors
    included, in one fused call; the gradient is the same reduction, with the same
    factors, of the upstream gradients (Horovod's). labels: each tensor's (_label)."""
    tensors = list(tensors)

    def reduce(inputs: list) -> list:
        return _summed_once(inputs, average, prescale_factor, postscale_factor, labels)

    if not all(t.dtype.is_floating for t in tensors):
        return reduce(tensors)

    @tf.custom_gradient
    def reduced(*inputs):
        def grad(*upstream):
            return reduce([_zero_if_none(g, t) for g, t in zip(upstream, inputs)])

        return reduce(list(inputs)), grad

    return list(reduced(*tensors))


# Set while the distributed optimizer or tape reduces a step's gradients: their ops are
# then steps of the check that the job shares its weights (a plain allreduce is none).
_averaging_gradients: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "averaging_gradients", default=False
)


@contextlib.contextmanager
def averaging_gradients():
    token = _averaging_gradients.set(True)
    try:
        yield
    finally:
        _averaging_gradients.reset(token)


def _summed_once(
    tensors: list, average: bool, prescale_factor=1.0, postscale_factor=1.0, labels=None
) -> list:
    """Each tensor times prescale_factor, summed over all ranks, times postscale_factor
    (divided by size for an Average, in double, as Horovod does: a float32 sum times
    float32(1/3) is not the sum / 3 in a third of values)."""
    size = basics.session().size
    prescaled = [_scale(t, _as_attribute(prescale_factor)) for t in tensors]
    summed = binding.gradients(
        prescaled,
        _team_id(),
        size,
        average=False,
        check_weights=_averaging_gradients.get(),
        labels=labels,
    )
    factor = _as_attribute(postscale_factor) / (size if average else 1)
    return [_scale(t, factor) for t in summed]


def _argument(what: str, i: int, one: bool) -> tuple[str, int]:
    """The name and list place (-1: none) of a call's argument i, for tensor_of."""
    return (what, -1) if one else (f"{what}[{i}]", i)


def _zero_if_none(grad, like):
    """An unconnected output's upstream gradient as zeros, so every rank reduces the same
    list."""
    return tf.zeros_like(like) if grad is None else tf.convert_to_tensor(grad)


def grouped_allreduce(
    tensors,
    average=None,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    process_set=global_process_set,
    name=None,
    ignore_name_scope=False,
):
    """Reduce a list of tensors over all ranks (one fused call for Sum/Average)."""
    return _allreduce_list(
        list(tensors),
        average,
        compression,
        op,
        prescale_factor,
        postscale_factor,
        process_set,
        "grouped_allreduce's tensors",
        name=name,
    )


def _allreduce_list(
    tensors: list,
    average,
    compression,
    op,
    prescale_factor,
    postscale_factor,
    process_set,
    what: str,
    one: bool = False,
    name=None,
) -> list:
    """grouped_allreduce's work. Errors name the caller's argument: `what[i]`, or `what`
    alone where the caller took one tensor (`one`), which the other ranks hear of as an
    argument, not as a place in a list. name: the caller's (Horovod's name=), which the
    ranks compare with the op and the factors (_label)."""
    if not tensors:  # no rank makes a call: nothing to tell
        _reduction_op(op, average, process_set)
        return []
    with _checked(lib.MLC_KIND_ALLREDUCE):
        sparse = any(isinstance(t, tf.IndexedSlices) for t in tensors)
        if not sparse:
            op = _reduction_op(op, average, process_set)
            # As Horovod: compressed first, the factors applied to what travels.
            compressed = [
                compression.compress(tensor_of(t, *_argument(what, i, one)))
                for i, t in enumerate(tensors)
            ]
    if sparse:  # one call per tensor, each checking its own argument (named as the caller's)
        return [
            allreduce(
                t,
                average=average,
                op=op,
                compression=compression,
                prescale_factor=prescale_factor,
                postscale_factor=postscale_factor,
                process_set=process_set,
            )
            if isinstance(t, tf.IndexedSlices)
            else _allreduce_list(
                [t],
                average,
                compression,
                op,
                prescale_factor,
                postscale_factor,
                process_set,
                _argument(what, i, one)[0],
                one=True,
            )[0]
            for i, t in enumerate(tensors)
        ]
    wire = [c[0] for c in compressed]
    if op in (Sum, Average):
        labels = [
            _label(name, None if one else i, op, prescale_factor, postscale_factor)
            for i in range(len(wire))
        ]
        reduced = _summed(wire, op == Average, prescale_factor, postscale_factor, labels)
    else:
        pre, post = _as_attribute(prescale_factor), _as_attribute(postscale_factor)
        reduced = [_scale(binding.allreduce(_scale(t, pre), CORE_OPS[op], 0), post) for t in wire]
    return [compression.decompress(r, ctx) for (_, ctx), r in zip(compressed, reduced)]


def allreduce(
    tensor,
    average=None,
    device_dense="",
    device_sparse="",
    compression=Compression.none,
    op=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    name=None,
    process_set=global_process_set,
    ignore_name_scope=False,
):
    """Reduce a tensor over all ranks; an IndexedSlices is gathered (Sum/Average only)."""
    if isinstance(tensor, tf.IndexedSlices):
        with _checked(lib.MLC_KIND_ALLGATHER):
            op = _reduction_op(op, average, process_set)
            if op not in (Sum, Average):
                raise NotImplementedError(
                    "allreduce of tf.IndexedSlices supports op=Sum and op=Average only; "
                    "densify it first (tf.convert_to_tensor) or use sparse_as_dense=True"
                )
            if prescale_factor != 1.0 or postscale_factor != 1.0:
                raise NotImplementedError(
                    "prescale_factor/postscale_factor are not supported with tf.IndexedSlices"
                )
        values = allgather(tensor.values)
        indices = allgather(tensor.indices)
        if op == Average:
            # Horovod's expression: TensorFlow's true division (integers give floats).
            values = values / tf.cast(basics.size(), values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    return _allreduce_list(
        [tensor],
        average,
        compression,
        op,
        prescale_factor,
        postscale_factor,
        process_set,
        "allreduce's tensor",
        one=True,
        name=name,
    )[0]


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenate every rank's tensor along the first dimension (which may differ)."""
    with _checked(lib.MLC_KIND_ALLGATHER):
        check_process_set(process_set)
        tensor = tensor_of(tensor, "allgather's tensor")
    # A scalar goes to the op too: it fails on every rank, naming this one.
    return binding.allgather(tensor, 0)


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    tensors = list(tensors)
    if not tensors:
        check_process_set(process_set)
    return [allgather(t, process_set=process_set) for t in tensors]


def reducescatter(
    tensor,
    device_dense="",
    compression=Compression.none,
    op=Average,
    name=None,
    process_set=global_process_set,
    ignore_name_scope=False,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    """Reduce over all ranks and keep this rank's slice of the first dimension."""
    with _checked(lib.MLC_KIND_REDUCESCATTER):
        check_process_set(process_set)
        _check_op(op)
        if op not in (Sum, Average):
            raise NotImplementedError("reducescatter supports op=Sum and op=Average")
        wire, ctx = compression.compress(tensor_of(tensor, "reducescatter's tensor"))
    summed = binding.reducescatter(_scale(wire, _as_attribute(prescale_factor)), "sum", 0)
    factor = _as_attribute(postscale_factor) / (basics.size() if op == Average else 1)
    return compression.decompress(_scale(summed, factor), ctx)


def grouped_reducescatter(
    tensors,
    device_dense="",
    compression=Compression.none,
    op=Average,
    process_set=global_process_set,
    prescale_factor=1.0,
    postscale_factor=1.0,
):
    return [
        reducescatter(
            t,
            compression=compression,
            op=op,
            process_set=process_set,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
        )
        for t in tensors
    ]


def alltoall(
    tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set
):
    """Send splits[i] rows of tensor to rank i (None: equal parts). Returns the rows
    received, in rank order, and with splits given also how many came from each rank
    (int32), as Horovod does."""
    with _checked(lib.MLC_KIND_ALLTOALL):
        check_process_set(process_set)
        tensor = tensor_of(tensor, "alltoall's tensor")
    received, counts = binding.alltoall(tensor, splits, 0)
    if splits is None:
        return received
    return received, tf.cast(counts, tf.int32)


# Broadcast moves values unchanged, so a dtype the core has no code for travels as one it
# has, reinterpreted bit for bit.
_BITCAST = {
    tf.uint32: tf.int32,
    tf.uint64: tf.int64,
    tf.complex64: tf.float32,
    tf.complex128: tf.float64,
}


def broadcast(
    tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set
):
    """root_rank's tensor on every rank (any numeric or bool dtype a variable can have)."""
    return _broadcast_list([tensor], root_rank, process_set, "broadcast's tensor", one=True)[0]


def _check_carried(t, place: int) -> None:
    """t's dtype is one the core moves, or travels as one (_carrier)."""
    if t.dtype not in binding.SUPPORTED and t.dtype not in _BITCAST:
        error = BadArgumentTypeError(
            f"ml_comm.horovod cannot broadcast a tensor of dtype {t.dtype.name}"
        )
        raise refused(error, "MLC_REFUSED_DTYPE", place)


def _carrier(t):
    return tf.bitcast(t, _BITCAST[t.dtype]) if t.dtype in _BITCAST else t


def _broadcast_list(
    tensors,
    root_rank,
    process_set=global_process_set,
    what: str = "broadcast's tensors",
    one: bool = False,
):
    """root_rank's values of the tensors (variables too). The gradient (Horovod's): the
    average over the ranks of the upstream gradients on root_rank, zeros elsewhere."""
    if not tensors:  # no rank makes a call: nothing to tell
        check_process_set(process_set)
        return []
    session = basics.session()
    with _checked(lib.MLC_KIND_BROADCAST):
        check_process_set(process_set)
        dense = [tensor_of(t, *_argument(what, i, one)) for i, t in enumerate(tensors)]
        for i, t in enumerate(dense):
            _check_carried(t, _argument(what, i, one)[1])
        root = session.root_index(root_rank)
    session.weights.shared()
    if not all(t.dtype.is_floating for t in dense):
        return _broadcast_once(dense, root)

    @tf.custom_gradient
    def broadcast_values(*inputs):
        def grad(*upstream):
            averaged = _summed_once([_zero_if_none(g, t) for g, t in zip(upstream, inputs)], True)
            return averaged if basics.rank() == root else [a * 0 for a in averaged]

        return _broadcast_once(list(inputs), root), grad

    return list(broadcast_values(*dense))


def _broadcast_once(dense: list, root: int) -> list:
    received = binding.broadcast([_carrier(t) for t in dense], _team_id(), root)
    return [
        value if value.dtype == original.dtype else tf.bitcast(value, original.dtype)
        for original, value in zip(dense, received)
    ]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assign root_rank's values to the variables in place; returns their values after
    the assignment (in a graph: tensors that run it when evaluated), as Horovod does."""
    one = not isinstance(variables, (list, tuple))
    variables = [variables] if one else list(variables)
    what = "broadcast_'s variable" if one else "broadcast_'s variables"
    values = _broadcast_list(variables, root_rank, process_set, what, one)
    assigned = [v.assign(value, read_value=False) for v, value in zip(variables, values)]
    if tf.executing_eagerly():
        return [v.read_value() for v in variables]
    with tf.control_dependencies([a for a in assigned if a is not None]):
        return [tf.identity(v.read_value()) for v in variables]


def join(device=""):
    """Horovod's join lets ranks with fewer batches stop early; ml_comm needs equal steps."""
    raise NotImplementedError(
        "hvd.join(): ml_comm pairs collectives by call order and needs every rank to make "
        "the same number of steps; use ml_comm.data.equal_steps to agree on them"
    )


def size_op(process_set_id=0, name=None):
    return tf.constant(basics.size(), tf.int32)


def local_size_op(name=None):
    return tf.constant(basics.local_size(), tf.int32)


def rank_op(name=None):
    return tf.constant(basics.rank(), tf.int32)


def local_rank_op(name=None):
    return tf.constant(basics.local_rank(), tf.int32)


def process_set_included_op(process_set_id=0, name=None):
    check_process_set(None if process_set_id == 0 else process_set_id)
    return tf.constant(1, tf.int32)
