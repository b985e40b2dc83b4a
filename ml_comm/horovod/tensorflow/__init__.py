"""`horovod.tensorflow` on ml_comm: process queries, collectives, training wrappers."""

from __future__ import annotations

from .. import basics, keras3
from ..basics import *  # noqa: F403  (the process queries and build flags)
from ..compression import Compression
from ..functions import allgather_object, broadcast_object, broadcast_object_fn, broadcast_variables
from ..ops import (
    Adasum,
    Average,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    allgather,
    allreduce,
    alltoall,
    broadcast,
    broadcast_,
    global_process_set,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    handle_average_backwards_compatibility,
    join,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    reducescatter,
    remove_process_set,
    size_op,
)
from ..surface import (
    BroadcastGlobalVariablesHook,
    LocalGradientAggregationHelper,
    SyncBatchNormalization,
    broadcast_global_variables,
    check_extension,
    check_num_rank_power_of_2,
    device_compatibility_check,
    gpu_available,
    refs_to_vars,
    split_list,
    vars_to_refs,
)
from ..training import DistributedGradientTape, DistributedOptimizer, PartialDistributedGradientTape
from . import elastic  # noqa: E402  (after the names it uses)
from .util import _executing_eagerly  # noqa: F401  (Horovod's tests call hvd._executing_eagerly)

keras3.install()

# Every public name, listed (the API reference reads this statically).
__all__ = [
    *basics.__all__,
    "Adasum",
    "Average",
    "BroadcastGlobalVariablesHook",
    "Compression",
    "DistributedGradientTape",
    "DistributedOptimizer",
    "LocalGradientAggregationHelper",
    "Max",
    "Min",
    "PartialDistributedGradientTape",
    "ProcessSet",
    "Product",
    "Sum",
    "SyncBatchNormalization",
    "add_process_set",
    "allgather",
    "allgather_object",
    "allreduce",
    "alltoall",
    "broadcast",
    "broadcast_",
    "broadcast_global_variables",
    "broadcast_object",
    "broadcast_object_fn",
    "broadcast_variables",
    "check_extension",
    "check_num_rank_power_of_2",
    "device_compatibility_check",
    "global_process_set",
    "gpu_available",
    "grouped_allgather",
    "grouped_allreduce",
    "grouped_reducescatter",
    "handle_average_backwards_compatibility",
    "join",
    "local_rank_op",
    "local_size_op",
    "process_set_included_op",
    "rank_op",
    "reducescatter",
    "refs_to_vars",
    "remove_process_set",
    "size_op",
    "split_list",
    "vars_to_refs",
]
